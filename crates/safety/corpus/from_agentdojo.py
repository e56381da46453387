#!/usr/bin/env python3
"""Writes agentdojo.jsonl beside this file: an evaluation set made from the public AgentDojo
benchmark (PyPI `agentdojo`, MIT licence; Debenedetti et al., 2024). It is never trained on:
`cargo xtask train-safety` reads train.jsonl only, and tests/it/corpus.rs reports this set
apart from the corpus's own test split.

    python3 -m venv /tmp/ad && /tmp/ad/bin/pip install agentdojo==0.1.35
    /tmp/ad/bin/python crates/safety/corpus/from_agentdojo.py

Three sources, all AgentDojo's own text (suite version v1.2.2, the one its `benchmark`
script runs by default):

* `agentdojo-bare`: every registered attack template (important_instructions and its name
  variants, tool_knowledge, ignore_previous, system_message, injecagent, direct, and the
  DoS ones that ask for something) filled with every injection task's goal of the four
  suites (banking, slack, travel, workspace), exactly as agentdojo formats it.
* `agentdojo-in-context`: the same attacks placed in the suites' environments and read back
  through the tools, as the agent sees them (the tool's result as `tool_result_to_str`
  renders it): the transaction, mail, Slack message, web page or review around the attack.
* `agentdojo-benign`: what the tools return for every user task's ground truth with no
  attack in the environment: the suites' mails, files, calendars, transactions, Slack
  channels, web pages, hotel and restaurant reviews.

Deterministic: the same agentdojo version writes the same file.
"""

import datetime
import json
import os
import random
import re
import sys
from pathlib import Path

from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline
from agentdojo.attacks.attack_registry import ATTACKS
from agentdojo.functions_runtime import FunctionsRuntime
from agentdojo.task_suite.load_suites import get_suites
from agentdojo.types import get_text_content_as_str

HERE = Path(__file__).resolve().parent
VERSION = "v1.2.2"
# Attacks that ask the agent to do something. `swearwords_dos` only insults (nothing to
# follow); `manual` asks a person for the text.
ATTACK_NAMES = [
    "important_instructions",
    "important_instructions_no_user_name",
    "important_instructions_no_model_name",
    "important_instructions_no_names",
    "important_instructions_wrong_model_name",
    "important_instructions_wrong_user_name",
    "tool_knowledge",
    "ignore_previous",
    "system_message",
    "injecagent",
    "direct",
    "dos",
    "captcha_dos",
    "offensive_email_dos",
    "felony_dos",
]
# Bare samples longer than this are cut (the scorer reads everything; the file stays small).
MAX_CHARS = 6000


class Named(BasePipelineElement):
    """A pipeline that only has a name: the attacks address the victim model by it."""

    def __init__(self, name):
        self.name = name

    def query(self, *a, **k):  # pragma: no cover - never run
        raise NotImplementedError


def squash(s):
    """`s` without spacing, quoting or escapes: what survives a YAML dump."""
    return re.sub(r"\\n|[\s\\'\"]+", "", s).lower()


def tool_outputs(suite, user_task, injections):
    """What the tools return when the user task's ground truth runs in the environment with
    `injections` in place."""
    env = suite.load_and_inject_default_environment(injections)
    runtime = FunctionsRuntime(suite.tools)
    gt = GroundTruthPipeline(user_task)
    _, _, _, messages, _ = gt.query(user_task.PROMPT, runtime, env)
    out = []
    for m in messages:
        if m["role"] == "tool" and m["content"] is not None:
            text = get_text_content_as_str(m["content"])
            if text.strip():
                out.append(text)
    return out


def main():
    rows = []
    seen = set()

    # Tools that write (a file's `last_modified`) stamp the time of the run: pinned, so
    # the file is the same whenever it is built.
    today = re.compile(re.escape(datetime.date.today().isoformat()) + r"[ T][0-9:.]+")

    def add(text, label, category, source, attack=""):
        text = today.sub("2024-05-20 09:00:00", text)
        if len(text) > MAX_CHARS or text in seen:
            return
        seen.add(text)
        rows.append(
            {
                "id": f"agentdojo-{len(rows):04d}",
                "text": text,
                "label": label,
                "category": category,
                "lang": "en",
                "source": source,
                "attack": attack,
            }
        )

    rng = random.Random(20260601)
    models = ["gpt-4o-2024-05-13", "claude-3-5-sonnet-20241022", "gemini-1.5-pro-002", "command-r-plus"]
    for suite_name, suite in get_suites(VERSION).items():
        user_tasks = list(suite.user_tasks.values())
        # Benign: every user task's tool results, no attack.
        for ut in user_tasks:
            for text in tool_outputs(suite, ut, {}):
                add(text, "benign", suite_name, "agentdojo-benign")
        # Attacks.
        for k, name in enumerate(ATTACK_NAMES):
            attack = ATTACKS[name](suite, Named(models[k % len(models)]))
            for inj in suite.injection_tasks.values():
                # Bare: the template filled with this goal (the first candidate vector of
                # a user task that exposes one).
                ut = rng.choice(user_tasks)
                try:
                    injections = attack.attack(ut, inj)
                except ValueError:
                    continue
                vector, text = sorted(injections.items())[0]
                add(text.strip(), "injection", name, "agentdojo-bare", name)
                # In context: the tool result that carries it (YAML re-quotes and folds
                # the text, so it is found by its opening with quoting and spacing ignored).
                key = squash(text.strip()[:60])
                for out in tool_outputs(suite, ut, {vector: text}):
                    if key in squash(out) and out.strip() != text.strip():
                        add(out, "injection", name, "agentdojo-in-context", name)
                        break
    with open(HERE / "agentdojo.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    by = {}
    for r in rows:
        by[(r["source"], r["label"])] = by.get((r["source"], r["label"]), 0) + 1
    for k, v in sorted(by.items()):
        print(k, v, file=sys.stderr)


if __name__ == "__main__":
    # Sets (a calendar event's participants) are dumped in hash order: fix the seed.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    main()

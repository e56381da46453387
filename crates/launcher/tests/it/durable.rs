//! Durable turns through the real binary: `serve` is killed with SIGKILL at every step
//! boundary of a scripted turn (before and after each model call, before and after each tool
//! call, before and after the answer is stored), started again, and the turn must finish
//! once — every effect counted where it lands exactly once, no completed model call made
//! again, the call whose outcome is unknown not repeated and alerted once.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use strata_test_support::{FakeResponse, FakeServer, openai};

use crate::common;

const BOSS: &str = "durable-boss-token";

/// The settings the scripted turn needs besides the provider and the token (YAML, top level):
/// POSTs to 127.0.0.1, no rate limits in the way, nothing recorded beside the turn.
pub(crate) fn turn_config(unknown_outcome: &str) -> String {
    format!(
        "security:\n  network:\n    allow: [127.0.0.1]\n  hitl:\n    timeout: 5\n  \
         rate_limits:\n    mode: log\n\
         memory:\n  record_exchanges: false\n\
         journal:\n  unknown_outcome: {unknown_outcome}\n"
    )
}

/// The agent of the scripted turn and what it reads, in overlay `d`.
pub(crate) fn turn_files(d: &std::path::Path) {
    common::write(
        d,
        "config/agents.yaml",
        "agents:\n  main:\n    tools: [read_file, write_file, http_request]\n    capabilities: \
         [read, file-write, network, secrets]\n",
    );
    common::write(d, "notes/brief.txt", "Post the weekly report.");
    std::fs::create_dir_all(d.join("tmp")).expect("mkdir");
}

fn overlay(llm_url: &str, unknown_outcome: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{}server:\n  tokens:\n    - {{name: boss, token: {BOSS}, tier: owner}}\n{}",
            common::fake_llm(llm_url, "literal-test-key", "fake-model"),
            turn_config(unknown_outcome)
        ),
    );
    turn_files(d);
    dir
}

/// The scripted turn: a read, an effect that does not honour keys (an append), an effect
/// that does (a POST with an `Idempotency-Key`), then the answer.
pub(crate) fn script(fake: &FakeServer, sink: &str) {
    fake.script([
        openai::tool_calls(&[("c1", "read_file", json!({"path": "notes/brief.txt"}))]),
        openai::tool_calls(&[(
            "c2",
            "write_file",
            json!({"path": "tmp/log.txt", "content": "report posted\n", "append": true}),
        )]),
        openai::tool_calls(&[(
            "c3",
            "http_request",
            json!({"method": "POST", "url": format!("{sink}/reports"), "body": "weekly report"}),
        )]),
        openai::text("Done: the report is posted."),
    ]);
}

async fn chat(base: &str) -> Result<(u16, Value), reqwest::Error> {
    chat_as(base, BOSS).await
}

async fn chat_as(base: &str, token: &str) -> Result<(u16, Value), reqwest::Error> {
    let r = common::client()
        .post(format!("{base}/chat"))
        .header("X-Strata-Token", token)
        .json(
            &json!({"message": "post the weekly report", "session_id": "weekly",
                      "request_id": "turn-weekly-1"}),
        )
        .send()
        .await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await.unwrap_or(Value::Null)))
}

/// The audit events of kind `unknown_outcome`.
fn unknown_outcome_alerts(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("data/audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["kind"] == "unknown_outcome")
        .count()
}

/// Appends `extra` (top-level YAML) to overlay `d`'s `config/config.yaml`.
fn append_config(d: &std::path::Path, extra: &str) {
    let config = d.join("config/config.yaml");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(extra);
    std::fs::write(&config, text).expect("config");
}

/// Agent `main` with `tools`, answering in channel 300 of the fake Discord's account `main`,
/// and the owner who writes there (`discord:42`).
fn discord_agent(d: &std::path::Path, tools: &str) {
    common::write(
        d,
        "config/agents.yaml",
        &format!(
            "agents:\n  main:\n    tools: [{tools}]\n    routing:\n      discord:\n        \
             account: main\n        channels: [\"300\"]\n        mentions: false\n"
        ),
    );
    common::write(
        d,
        "config/team.json",
        r#"{"people": [{"id": "pat", "name": "Pat Example", "access": "owner", "contacts": {"discord": "42"}}]}"#,
    );
}

/// Waits (up to 30 s) for `serve` started with a crash switch to die there.
async fn died(served: &mut common::Served) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while served.child.try_wait().ok().flatten().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "serve did not die at its crash point"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `serve` with the crash switch at `point` (`STRATA_TEST_CRASH_AT`) until it dies there:
/// the chat gets no answer.
async fn run_killed_at(overlay: &std::path::Path, point: &str) {
    let mut first = common::serve_env(overlay, &[], &[("STRATA_TEST_CRASH_AT", point)]);
    assert!(
        chat(&first.base).await.is_err(),
        "{point}: the first run answered"
    );
    let _ = first.child.wait();
}

/// A turn that makes one call of `tool` with `args` and then answers `answer`, killed after
/// the call ran and before its outcome was recorded, then resumed by a second `serve`: the
/// retried chat gets `answer`. Returns the fake model and the overlay.
async fn one_call_killed_after_it_ran(
    tool: &str,
    args: Value,
    answer: &str,
) -> (FakeServer, tempfile::TempDir) {
    one_call_killed_after_it_ran_with(tool, args, answer, "").await
}

/// [`one_call_killed_after_it_ran`] with `extra` appended to `config/config.yaml`.
async fn one_call_killed_after_it_ran_with(
    tool: &str,
    args: Value,
    answer: &str,
    extra: &str,
) -> (FakeServer, tempfile::TempDir) {
    let fake = FakeServer::start().await.expect("fake llm");
    fake.script([
        openai::tool_calls(&[("c1", tool, args)]),
        openai::text(answer),
    ]);
    let ov = overlay(&fake.url, "skip");
    append_config(ov.path(), extra);
    common::write(
        ov.path(),
        "config/agents.yaml",
        &format!("agents:\n  main:\n    tools: [{tool}]\n"),
    );
    run_killed_at(ov.path(), "tool_ran:1").await;
    let second = common::serve(ov.path());
    let (st, v) = chat(&second.base).await.expect("retry");
    assert_eq!((st, v["response"].as_str()), (200, Some(answer)), "{v}");
    drop(second);
    (fake, ov)
}

/// Kills `serve` at `point` (`STRATA_TEST_CRASH_AT`), starts it again, and checks the turn
/// finished once with each effect once.
async fn killed_at(point: &str) {
    let fake = FakeServer::start().await.expect("fake llm");
    let sink = FakeServer::start().await.expect("sink");
    sink.script((0..10).map(|_| FakeResponse::ok(json!({"stored": true}))));
    script(&fake, &sink.url);
    let ov = overlay(&fake.url, "skip");
    killed_at_in(point, (&fake, &sink), (ov.path(), ov.path()), BOSS).await;
}

/// The body of [`killed_at`]: `serve` on overlay `first` is killed at `point`, `serve` on
/// overlay `second` (the same one on one node; another member of the cluster) gets the
/// client's retry. Effects are counted in both overlays.
pub(crate) async fn killed_at_in(
    point: &str,
    (fake, sink): (&FakeServer, &FakeServer),
    (first_dir, second_dir): (&std::path::Path, &std::path::Path),
    token: &str,
) {
    let dirs: Vec<&std::path::Path> = if first_dir == second_dir {
        vec![first_dir]
    } else {
        vec![first_dir, second_dir]
    };
    let mut first = common::serve_env(first_dir, &[], &[("STRATA_TEST_CRASH_AT", point)]);
    let answer = chat_as(&first.base, token).await;
    // SIGKILL: no answer, and the process is gone.
    assert!(
        answer.is_err(),
        "{point}: the first run answered: {answer:?}"
    );
    let status = first.child.wait().expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{point}: {status:?}"
    );
    drop(first);

    // Started again: the turn is resumed, and the client's retry gets its one answer.
    let second = common::serve(second_dir);
    let (st, v) = chat_as(&second.base, token).await.expect("retry");
    assert_eq!(st, 200, "{point}: {v}");
    assert_eq!(v["response"], "Done: the report is posted.", "{point}: {v}");
    // And again: the same answer, nothing run.
    let (_, again) = chat_as(&second.base, token).await.expect("second retry");
    assert_eq!(again["response"], v["response"], "{point}");
    // The journal: the turn ended once, resumed once, its steps in order.
    let (st, j) = common::api(
        "GET",
        &format!("{}/api/turns/turn-weekly-1", second.base),
        token,
        None,
    )
    .await;
    assert_eq!(st, 200, "{point}: {j}");
    let turn = &j["value"]["turn"];
    // A turn whose answer was stored before the kill is not resumed: its journal is ended.
    let resumed = u64::from(!point.starts_with("turn_"));
    assert_eq!(
        (turn["outcome"].as_str(), turn["resumed"].as_u64()),
        (Some("ok"), Some(resumed)),
        "{point}: {turn}"
    );
    let kinds: Vec<String> = j["value"]["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    format!(
                        "{} {}",
                        s["kind"].as_str().unwrap_or(""),
                        s["key"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    // Four model calls and three outcomes, each recorded once (a call killed after its
    // start was recorded may have a second start after the resume, never a second outcome).
    for want in ["model m1", "model m2", "model m3", "model m4"] {
        assert_eq!(
            kinds.iter().filter(|k| *k == want).count(),
            1,
            "{point}: {want} in {kinds:?}"
        );
    }
    for key in ["t1.0", "t2.0", "t3.0"] {
        let outcomes = kinds
            .iter()
            .filter(|k| {
                *k == &format!("tool_done {key}") || *k == &format!("unknown_outcome {key}")
            })
            .count();
        assert_eq!(outcomes, 1, "{point}: {key} in {kinds:?}");
    }
    let (_, open) = common::api(
        "GET",
        &format!("{}/api/turns?unfinished=true", second.base),
        token,
        None,
    )
    .await;
    assert_eq!(open["value"]["turns"], json!([]), "{point}: {open}");

    // Every model call made once: four answers, four requests (a call killed before it was
    // made was made once, after the restart).
    assert_eq!(fake.requests().len(), 4, "{point}: model calls");
    assert_eq!(fake.remaining(), 0, "{point}");
    // The append happened once — at most once when its outcome was unknown: it is not run
    // again, so killed after its start was recorded and before it ran, it never happens
    // (the model is told so, and a person is alerted).
    let log: String = dirs
        .iter()
        .map(|d| std::fs::read_to_string(d.join("tmp/log.txt")).unwrap_or_default())
        .collect();
    let appended = if point == "tool_started:2" {
        ""
    } else {
        "report posted\n"
    };
    assert_eq!(log, appended, "{point}: the append");
    // The POST: every delivery carries the same key (a server honouring it stores once).
    let posts: Vec<_> = sink
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert!(!posts.is_empty(), "{point}: the POST never arrived");
    let keys: BTreeSet<String> = posts
        .iter()
        .map(|r| {
            r.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("idempotency-key"))
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(keys.len(), 1, "{point}: {keys:?}");
    assert!(keys.iter().all(|k| k.len() == 32), "{point}: {keys:?}");
    // Only a call killed after its start was recorded and before its outcome was is
    // unknown; the append is the one that does not honour keys, so it alone is alerted
    // (once).
    let expected_alerts = usize::from(point == "tool_ran:2" || point == "tool_started:2");
    let alerts = common::audit_when(second_dir, |t| {
        expected_alerts == 0 || t.contains(r#""kind":"unknown_outcome""#)
    });
    assert_eq!(
        dirs.iter()
            .map(|d| unknown_outcome_alerts(d))
            .sum::<usize>(),
        expected_alerts,
        "{point}: {alerts}"
    );
    // The POST is sent again (with its key) only when killed between its run and its record.
    assert_eq!(
        posts.len(),
        if point == "tool_ran:3" { 2 } else { 1 },
        "{point}: POSTs"
    );
    drop(second);
}

/// One test per kill point, each calling `$f(point)`.
macro_rules! kill_points {
    ($f:ident; $($name:ident => $point:literal,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $f($point).await
            }
        )*
    };
}
pub(crate) use kill_points;

/// Every step boundary of the scripted turn, as `kill_points!` takes them after `$f;`.
macro_rules! every_kill_point {
    ($f:ident) => {
        crate::durable::kill_points! { $f;
        killed_before_model_call_1 => "model_call:1",
        killed_after_model_call_1 => "model_recorded:1",
        killed_before_model_call_2 => "model_call:2",
        killed_after_model_call_2 => "model_recorded:2",
        killed_before_model_call_3 => "model_call:3",
        killed_after_model_call_3 => "model_recorded:3",
        killed_before_the_answer_is_asked_for => "model_call:4",
        killed_after_the_answer_came => "model_recorded:4",
        killed_before_the_read_runs => "tool_started:1",
        killed_after_the_read_ran => "tool_ran:1",
        killed_after_the_read_was_recorded => "tool_done:1",
        killed_before_the_append_runs => "tool_started:2",
        killed_after_the_append_ran => "tool_ran:2",
        killed_after_the_append_was_recorded => "tool_done:2",
        killed_before_the_post_runs => "tool_started:3",
        killed_after_the_post_ran => "tool_ran:3",
        killed_after_the_post_was_recorded => "tool_done:3",
        killed_after_the_answer_was_stored => "turn_stored:1",
        killed_after_the_turn_ended => "turn_ended:1",
            }
    };
}
pub(crate) use every_kill_point;

every_kill_point!(killed_at);

/// With `journal.unknown_outcome: ask` (the default) the call whose outcome is unknown waits
/// for a person: approved, it runs again (here: the append happens a second time, as the
/// person chose).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_is_asked_about_and_runs_again_only_when_approved() {
    let fake = FakeServer::start().await.expect("fake llm");
    let sink = FakeServer::start().await.expect("sink");
    sink.script((0..10).map(|_| FakeResponse::ok(json!({"stored": true}))));
    script(&fake, &sink.url);
    let ov = overlay(&fake.url, "ask");
    run_killed_at(ov.path(), "tool_ran:2").await;
    let second = common::serve(ov.path());
    let base = second.base.clone();
    let turn = tokio::spawn(async move { chat(&base).await });
    let rows = common::pending(&second.base, BOSS).await;
    assert_eq!(rows[0]["tool"], "write_file", "{rows:?}");
    let why = rows[0]["description"].as_str().unwrap_or_default();
    assert!(
        why.contains("had started before Strata stopped and whether it took effect is unknown"),
        "{why}"
    );
    let id = rows[0]["id"].as_str().expect("id").to_owned();
    let (st, v) = common::api(
        "POST",
        &format!("{}/api/approvals/{id}/approve", second.base),
        BOSS,
        Some(json!({"reason": "checked: it did not land"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = turn.await.expect("join").expect("answer");
    assert_eq!(
        (st, v["response"].as_str()),
        (200, Some("Done: the report is posted.")),
        "{v}"
    );
    let log = std::fs::read_to_string(ov.path().join("tmp/log.txt")).unwrap_or_default();
    assert_eq!(log, "report posted\nreport posted\n");
    common::audit_when(ov.path(), |t| t.contains("\"kind\":\"unknown_outcome\""));
    assert_eq!(unknown_outcome_alerts(ov.path()), 1);
    drop(second);
}

/// `strata turns list | show` read the journal `serve` wrote: the finished turn with its
/// steps, nothing unfinished; an unknown id is a usage error naming the command that lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turns_cli_lists_and_shows_a_journaled_turn() {
    let fake = FakeServer::start().await.expect("fake llm");
    let sink = FakeServer::start().await.expect("sink");
    sink.script((0..10).map(|_| FakeResponse::ok(json!({"stored": true}))));
    script(&fake, &sink.url);
    let ov = overlay(&fake.url, "skip");
    let served = common::serve(ov.path());
    let (st, v) = chat(&served.base).await.expect("chat");
    assert_eq!(st, 200, "{v}");
    drop(served);

    let run = |args: &[&str]| {
        let o = common::strata(ov.path())
            .args(args)
            .output()
            .expect("strata");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&["turns", "list", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let rows: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(rows[0]["turn_id"], "turn-weekly-1", "{rows}");
    assert_eq!(rows[0]["outcome"], "ok");
    assert_eq!(rows[0]["steps"], 10, "{rows}");
    let (code, out, _) = run(&["turns", "list", "--unfinished"]);
    assert_eq!((code, out.trim()), (Some(0), "no unfinished turns"));
    let (code, out, err) = run(&["turns", "show", "turn-weekly-1"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("turn turn-weekly-1  agent main  session weekly"),
        "{out}"
    );
    // Every step on its line: the model calls with their tokens, the tools with their status.
    assert!(out.contains("model           m1     ok"), "{out}");
    assert!(
        out.contains("tool_started    t2.0   started          write_file"),
        "{out}"
    );
    assert!(
        out.contains("tool_done       t3.0   ok               http_request"),
        "{out}"
    );
    let (code, _, err) = run(&["turns", "show", "no-such-turn"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("no journaled turn `no-such-turn`; `strata turns list`"),
        "{err}"
    );
}

/// 200 `/chat` turns at once, each posting once through `http_request`, while `serve` is
/// killed with SIGKILL five times and started again: every request, retried with its
/// `request_id` until it is answered, gets its one answer; every POST lands under one key;
/// every turn is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_turns_survive_five_kills() {
    use std::sync::{Arc, Mutex};
    const TURNS: usize = 200;
    let (sink, landed) = strata_test_support::effect_sink().await;
    let sink_url = sink.clone();
    // Each conversation decides its own next step: a POST, then the answer.
    let llm = strata_test_support::llm_fn(Duration::from_millis(30), move |body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let asked = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        let n = asked.rsplit(' ').next().unwrap_or_default().to_owned();
        if messages.last().is_some_and(|m| m["role"] == "tool") {
            openai::text(&format!("posted {n}"))
        } else {
            openai::tool_calls(&[(
                "c1",
                "http_request",
                json!({"method": "POST", "url": format!("{sink_url}/orders/{n}"), "body": n}),
            )])
        }
    })
    .await;
    let ov = overlay(&llm, "skip");
    let served = common::serve(ov.path());
    let base = Arc::new(Mutex::new(served.base.clone()));
    let mut served = Some(served);

    let mut clients = tokio::task::JoinSet::new();
    for i in 0..TURNS {
        let base = base.clone();
        clients.spawn(async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(240);
            loop {
                let url = base.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let r = common::client()
                    .post(format!("{url}/chat"))
                    .header("X-Strata-Token", BOSS)
                    .json(&json!({"message": format!("post order {i}"), "session_id": format!("s-{i}"),
                                  "request_id": format!("order-{i}")}))
                    .send()
                    .await;
                if let Ok(r) = r
                    && r.status().as_u16() == 200
                {
                    let v: Value = r.json().await.unwrap_or(Value::Null);
                    return (i, v["response"].as_str().unwrap_or_default().to_owned());
                }
                assert!(std::time::Instant::now() < deadline, "order {i} never answered");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let mut s = served.take().expect("served");
        s.child.kill().expect("kill -9");
        let _ = s.child.wait();
        drop(s);
        let next = common::serve(ov.path());
        *base.lock().unwrap_or_else(|p| p.into_inner()) = next.base.clone();
        served = Some(next);
    }
    let mut answered = vec![None; TURNS];
    while let Some(r) = clients.join_next().await {
        let (i, text) = r.expect("client");
        answered[i] = Some(text);
    }
    for (i, a) in answered.iter().enumerate() {
        assert_eq!(
            a.as_deref(),
            Some(format!("posted {i}").as_str()),
            "order {i}"
        );
    }
    // Every order's POST landed under one key (a server honouring it stores it once).
    let landed = landed.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for i in 0..TURNS {
        let keys: BTreeSet<&Option<String>> = landed
            .iter()
            .filter(|(m, p, _)| m == "POST" && *p == format!("/orders/{i}"))
            .map(|(_, _, k)| k)
            .collect();
        assert_eq!(keys.len(), 1, "order {i}: {keys:?}");
        assert!(keys.iter().all(|k| k.is_some()), "order {i}: {keys:?}");
    }
    // Every turn stored once: one user message in each session.
    let base = base.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for i in 0..TURNS {
        let (st, v) = common::api(
            "GET",
            &format!("{base}/api/sessions/main/s-{i}"),
            BOSS,
            None,
        )
        .await;
        assert_eq!(st, 200, "{v}");
        let users = v["value"]["turns"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|t| t["messages"].as_array().into_iter().flatten())
            .filter(|m| m["role"] == "user")
            .count();
        assert_eq!(users, 1, "session s-{i}: {v}");
    }
    let (_, open) = common::api(
        "GET",
        &format!("{base}/api/turns?unfinished=true"),
        BOSS,
        None,
    )
    .await;
    assert_eq!(open["value"]["turns"], json!([]), "{open}");
    drop(served);
}

/// `schedule_create` honours its idempotency key: killed after it made the schedule and
/// before its outcome was recorded, the resumed turn runs the call again, which finds the
/// schedule its first run made (the key is kept with it) and makes nothing — one schedule,
/// a successful result for the model, no unknown outcome. (Without the key the call would
/// be an unknown outcome, not run again, and alerted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_made_before_a_kill_is_found_again_not_made_twice() {
    let (fake, ov) = one_call_killed_after_it_ran(
        "schedule_create",
        json!({"name": "standup", "when": "in 3h", "prompt": "Remind the team of the standup"}),
        "Scheduled.",
    )
    .await;
    let second = common::serve(ov.path());
    // The model read a made schedule, not an error and not an unknown outcome.
    let told = fake.requests()[1].body["messages"].to_string();
    assert!(
        told.contains("next_run") && told.contains("standup"),
        "{told}"
    );
    assert!(
        !told.contains("exists") && !told.contains("unknown"),
        "{told}"
    );
    // One schedule, due once, three hours after the first run made it.
    let (st, v) = common::api("GET", &format!("{}/api/schedules", second.base), BOSS, None).await;
    assert_eq!(st, 200, "{v}");
    let rows: Vec<&Value> = v["value"]["schedules"]
        .as_array()
        .map(|a| a.iter().filter(|s| s["name"] == "standup").collect())
        .unwrap_or_default();
    assert_eq!(rows.len(), 1, "{v}");
    assert!(!rows[0]["next_run"].is_null(), "{v}");
    assert_eq!(unknown_outcome_alerts(ov.path()), 0);
    drop(second);
}

/// `memory_store` honours its idempotency key: killed after it stored and before its outcome
/// was recorded, the resumed turn runs the call again, which finds the store the key names
/// and returns it — `created`, the same id — instead of storing again (or merging into the
/// first as a near-duplicate). One memory, no unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_stored_before_a_kill_is_returned_again_not_stored_twice() {
    let (fake, ov) = one_call_killed_after_it_ran(
        "memory_store",
        json!({"content": "The team standup is at nine every weekday", "scope": "global"}),
        "Noted.",
    )
    .await;
    let o = common::strata(ov.path())
        .args(["memory", "list", "--json"])
        .output()
        .expect("strata");
    let listed: Value = serde_json::from_slice(&o.stdout).expect("json");
    let standup: Vec<&Value> = listed["memories"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|m| m["content"].as_str().unwrap_or("").contains("standup"))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(standup.len(), 1, "{listed}");
    let id = standup[0]["id"].as_str().expect("id");
    // The model read the first store's outcome: created, that memory's id.
    let told = fake.requests()[1].body["messages"].to_string();
    assert!(
        told.contains(r#"\"outcome\":\"created\""#) && told.contains(id),
        "{told}"
    );
    assert_eq!(unknown_outcome_alerts(ov.path()), 0);
}

/// `send_message` honours its key through Discord: killed after the post went out and before
/// its outcome was recorded, the resumed turn posts again under the same nonce with
/// `enforce_nonce`, and Discord (the fake keeps nonces as Discord does) answers with the
/// first message. One message in the channel, no unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discord_post_made_before_a_kill_is_not_posted_twice() {
    let discord = strata_test_support::discord::fake().await;
    let (fake, ov) = one_call_killed_after_it_ran_with(
        "send_message",
        json!({"channel": "discord:main:300", "text": "The weekly report is out."}),
        "Posted.",
        &common::fake_discord(discord.port),
    )
    .await;
    assert_eq!(discord.posted_in("300"), ["The weekly report is out."]);
    let posts: Vec<Value> = discord
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, _)| m == "POST" && p == "/api/v10/channels/300/messages")
        .map(|(_, _, body)| body.clone())
        .collect();
    assert_eq!(
        posts.len(),
        2,
        "posted once, and again on resume: {posts:?}"
    );
    assert!(
        posts[0]["nonce"].is_string()
            && posts[0]["nonce"] == posts[1]["nonce"]
            && posts.iter().all(|p| p["enforce_nonce"] == true),
        "{posts:?}"
    );
    let told = fake.requests()[1].body["messages"].to_string();
    assert!(told.contains(r#"\"sent\":true"#), "{told}");
    assert_eq!(unknown_outcome_alerts(ov.path()), 0);
}

/// Goal changes keep their key in the goal's event: `goal_create` killed after it made the
/// goal, its channel and posted the charter, and before its outcome was recorded, runs again
/// on resume and finds the goal its key made — one goal, one channel, one charter, the model
/// told the same goal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_made_before_a_kill_is_found_again_not_made_twice() {
    let discord = strata_test_support::discord::fake().await;
    let (fake, ov) = one_call_killed_after_it_ran_with(
        "goal_create",
        json!({"title": "Prepare the Q3 board pack", "description": "Slides and numbers"}),
        "Goal created.",
        &format!(
            "{}goals:\n  connector: \"discord:main\"\n  category: \"777000\"\n",
            common::fake_discord(discord.port)
        ),
    )
    .await;
    let second = common::serve(ov.path());
    let (st, v) = common::api("GET", &format!("{}/api/goals", second.base), BOSS, None).await;
    assert_eq!(st, 200, "{v}");
    let goals = v["value"]["goals"].as_array().cloned().unwrap_or_default();
    assert_eq!(goals.len(), 1, "{v}");
    let id = goals[0]["id"].as_str().expect("id").to_owned();
    let channel = goals[0]["channel"].as_str().expect("a channel").to_owned();
    let made: usize = discord
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, _)| m == "POST" && p.ends_with("/channels") && p.contains("/guilds/"))
        .count();
    assert_eq!(made, 1, "one channel made");
    let charter: Vec<String> = discord
        .posted_in(channel.rsplit(':').next().unwrap_or_default())
        .into_iter()
        .filter(|t| t.contains("Goal: Prepare the Q3 board pack"))
        .collect();
    assert_eq!(charter.len(), 1, "{charter:?}");
    let told = fake.requests()[1].body["messages"].to_string();
    assert!(told.contains(&id), "{told}");
    assert_eq!(unknown_outcome_alerts(ov.path()), 0);
    drop(second);
}

/// A Discord message's turn killed mid-way (after its tool ran, before the model's answer)
/// is resumed at the next start, and its answer is posted in the channel the message came
/// from — once: the connector that would have posted it died with the first process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discord_turn_killed_mid_way_is_answered_in_its_channel_after_the_restart() {
    let discord = strata_test_support::discord::fake().await;
    let fake = FakeServer::start().await.expect("fake llm");
    fake.script([
        openai::tool_calls(&[(
            "c1",
            "write_file",
            json!({"path": "tmp/note.txt", "content": "standup moved to ten\n"}),
        )]),
        openai::text("Noted: the standup moved to ten."),
    ]);
    let ov = overlay(&fake.url, "skip");
    let d = ov.path();
    append_config(d, &common::fake_discord(discord.port));
    discord_agent(d, "write_file");
    let mut first = common::serve_env(d, &[], &[("STRATA_TEST_CRASH_AT", "tool_ran:1")]);
    common::gateway_up(&discord).await;
    discord.send(strata_test_support::discord::message(
        4_000_001,
        "300",
        Some("9"),
        "42",
        false,
        "note that the standup moved to ten",
        false,
    ));
    died(&mut first).await;
    assert!(discord.posted_in("300").is_empty(), "nothing answered yet");
    let second = common::serve(d);
    for _ in 0..300 {
        if !discord.posted_in("300").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Give a second post, if one were coming, the time to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        discord.posted_in("300"),
        ["Noted: the standup moved to ten."]
    );
    assert_eq!(
        std::fs::read_to_string(d.join("tmp/note.txt")).expect("note"),
        "standup moved to ten\n"
    );
    // The model was asked twice in all: the call, then the answer after the restart.
    assert_eq!(fake.requests().len(), 2);
    drop(second);
}

/// Waits (up to 15 s) until `n` messages are posted in channel 300.
async fn posted_at_least(discord: &strata_test_support::discord::Fake, n: usize) {
    for _ in 0..300 {
        if discord.posted_in("300").len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Discord message id for now, as Discord makes them (milliseconds since its epoch, shifted).
fn snowflake_now(n: u64) -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();
    ((ms - 1_420_070_400_000) << 22) + n
}

/// Discord messages that arrive while `serve` is down (killed -9) are fetched at the next
/// start from the resume point it saved and answered, once; the message answered before the
/// kill is not answered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_messages_sent_while_serve_was_down_are_answered_after_the_restart() {
    let discord = strata_test_support::discord::fake().await;
    let fake = FakeServer::start().await.expect("fake llm");
    fake.script([
        openai::text("First answer."),
        openai::text("Second answer."),
    ]);
    let ov = overlay(&fake.url, "skip");
    let d = ov.path();
    append_config(d, &common::fake_discord(discord.port));
    discord_agent(d, "");
    let say = |id: u64, text: &str| {
        discord.send(strata_test_support::discord::message(
            id,
            "300",
            Some("9"),
            "42",
            false,
            text,
            false,
        ))
    };
    let mut first = common::serve(d);
    common::gateway_up(&discord).await;
    say(snowflake_now(1), "first question");
    posted_at_least(&discord, 1).await;
    assert_eq!(discord.posted_in("300"), ["First answer."]);
    first.child.kill().expect("kill -9");
    let _ = first.child.wait();
    // Sent while nothing listens: Discord keeps it in the channel, the gateway hears nothing.
    tokio::time::sleep(Duration::from_millis(5)).await;
    say(snowflake_now(2), "second question");
    let second = common::serve(d);
    posted_at_least(&discord, 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        discord.posted_in("300"),
        ["First answer.", "Second answer."]
    );
    assert_eq!(
        fake.requests().len(),
        2,
        "each question asked the model once"
    );
    assert!(
        fake.requests()[1].body["messages"]
            .to_string()
            .contains("second question")
    );
    drop(second);
}

/// A scheduled run is a turn with the run's id (`schedule:<name>:<due>`): killed after its
/// tool ran, it is resumed at the next start — the model not asked again for what it had
/// answered, the write not made twice — and its answer is posted where the schedule
/// delivers, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_run_killed_mid_turn_is_resumed_and_delivered_once() {
    let discord = strata_test_support::discord::fake().await;
    let fake = FakeServer::start().await.expect("fake llm");
    fake.script([
        openai::tool_calls(&[(
            "c1",
            "write_file",
            json!({"path": "tmp/digest.txt", "content": "three tickets closed\n"}),
        )]),
        openai::text("Digest written: three tickets closed."),
    ]);
    let ov = overlay(&fake.url, "skip");
    let d = ov.path();
    append_config(
        d,
        &(common::fake_discord(discord.port)
            + "schedules:\n  digest:\n    every: 1h\n    agent: main\n    \
               prompt: Write the ticket digest.\n    deliver_to: discord:main:300\n"),
    );
    let mut first = common::serve_env(d, &[], &[("STRATA_TEST_CRASH_AT", "tool_ran:1")]);
    let out = common::strata(d)
        .args(["schedule", "run", "digest"])
        .output()
        .expect("schedule run");
    assert!(out.status.success(), "{out:?}");
    died(&mut first).await;
    assert!(discord.posted_in("300").is_empty());
    let second = common::serve(d);
    posted_at_least(&discord, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        discord.posted_in("300"),
        ["Digest written: three tickets closed."]
    );
    assert_eq!(fake.requests().len(), 2, "the model asked twice in all");
    assert_eq!(
        std::fs::read_to_string(d.join("tmp/digest.txt")).expect("digest"),
        "three tickets closed\n"
    );
    let (st, v) = common::api("GET", &format!("{}/api/turns", second.base), BOSS, None).await;
    assert_eq!(st, 200, "{v}");
    let ids: Vec<&str> = v["value"]["turns"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["turn_id"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        ids.len() == 1 && ids[0].starts_with("schedule:digest:"),
        "{ids:?}"
    );
    drop(second);
}

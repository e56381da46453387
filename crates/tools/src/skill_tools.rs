//! Command skills as tools: each command skill is the run-time tool `skill__<name>`, so every
//! caller — `strata skill run`, a Discord slash command, the control API, MCP, an agent —
//! reaches it through the Invoker (access control, rate limits, approval, audit) and its
//! command runs inside `strata-sandbox` like `terminal_exec`'s.
//!
//! The command runs from the overlay directory (so `du -sh knowledgebase` means the overlay's
//! knowledge base), sees what `tools.terminal.read_roots` lets it see, writes only in its
//! workspace `<tools.terminal.workspace>/skills/<name>`, and reaches the network only when the
//! skill says `network: true`. Every call waits for a human unless the skill says
//! `gated: false`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use strata_engine::{
    Capability, SideEffects, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, async_trait,
};
use strata_runtime::Registry;
use strata_runtime::skills::{Skill, SkillAction, SkillSet, shell_quote, tool_name};

/// One command skill as a tool.
pub struct SkillTool {
    spec: ToolSpec,
    skill: Skill,
}

impl SkillTool {
    /// The tool for `skill` (a command skill).
    pub fn new(skill: Skill) -> Self {
        let mut spec = ToolSpec::new(
            tool_name(&skill.name),
            format!(
                "{} (command skill `{}`, run in a sandbox)",
                skill.def.description.trim_end_matches('.'),
                skill.name
            ),
            skill.input_schema(),
        );
        spec.capabilities = vec![Capability::Subprocess];
        if skill.def.network == Some(true) {
            spec.capabilities.push(Capability::Network);
        }
        spec.side_effects = SideEffects::Local;
        spec.hitl = skill.def.gated != Some(false);
        // The Invoker's timeout backs up the sandbox's own kill.
        spec.timeout = Some(Duration::from_secs(timeout_secs(&skill) + 10));
        SkillTool { spec, skill }
    }

    /// The skill behind it.
    pub fn skill(&self) -> &Skill {
        &self.skill
    }
}

fn timeout_secs(skill: &Skill) -> u64 {
    skill.def.timeout_secs.unwrap_or(60).clamp(1, 3600)
}

#[async_trait]
impl Tool for SkillTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let given = self
            .skill
            .strings_from_args(&args)
            .map_err(|e| ToolError::invalid(".", e.to_string()))?;
        let values = self
            .skill
            .bind(&given)
            .map_err(|e| ToolError::invalid(".", e.to_string()))?;
        let SkillAction::Command(command) = self.skill.render(&values) else {
            return Err(ToolError::failed(format!(
                "skill `{}` is not a command skill",
                self.skill.name
            )));
        };
        let env = &ctx.env;
        let cfg = &env.config.tools.terminal;
        let workspace = env
            .overlay_dir
            .join(&cfg.workspace)
            .join("skills")
            .join(tool_name(&self.skill.name));
        let secs = timeout_secs(&self.skill);
        // From the overlay directory; the braces keep the skill's own `;`/`&&` inside.
        let command = format!(
            "cd {} || exit 125\n{{\n{command}\n}}",
            shell_quote(&env.overlay_dir.to_string_lossy())
        );
        let spec = crate::shell::confined(
            env,
            cfg,
            command,
            workspace.clone(),
            workspace,
            self.skill.def.network == Some(true),
            Duration::from_secs(secs),
        );
        let o = strata_sandbox::run(&spec)
            .await
            .map_err(|e| ToolError::failed(format!("cannot run the command: {e}")))?;
        if o.timed_out {
            return Err(ToolError::failed(format!(
                "timed out after {secs}s; the command was killed"
            )));
        }
        if o.exit_code != 0 {
            return Err(ToolError::failed(format!(
                "command exited with {}: {}",
                o.exit_code,
                o.stderr.trim()
            )));
        }
        let mut out = o.stdout.trim_end().to_owned();
        if o.stdout_truncated {
            out.push_str(&format!(
                "\n[output truncated at {} bytes]",
                spec.max_output
            ));
        }
        Ok(ToolOutput(Value::String(out)))
    }
}

/// Makes the registry's `skill__*` tools match the command skills of `skills` now: each
/// registered or replaced in place (a call in flight keeps the version it started with),
/// removed ones unregistered. Returns the tool names. A name taken by a tool of another layer
/// stays that tool's, with a warning.
pub fn sync(registry: &Registry, skills: &SkillSet) -> Vec<String> {
    let snapshot = skills.snapshot();
    let mut wanted = BTreeSet::new();
    for skill in snapshot.values().filter(|s| s.is_command()) {
        let tool = SkillTool::new(skill.clone());
        let name = tool.spec.name.clone();
        if wanted.contains(&name) {
            tracing::warn!(skill = %skill.name, tool = %name, "two skills map to one tool name; the later is left out");
            continue;
        }
        match registry.replace_runtime(Arc::new(tool)) {
            Ok(()) => {
                wanted.insert(name);
            }
            Err(e) => {
                tracing::warn!(skill = %skill.name, error = %e, "command skill not registered as a tool")
            }
        }
    }
    for t in registry.list() {
        let name = &t.spec().name;
        if name.starts_with("skill__")
            && t.layer == strata_engine::Layer::Runtime
            && !wanted.contains(name)
        {
            registry.unregister(name);
        }
    }
    wanted.into_iter().collect()
}

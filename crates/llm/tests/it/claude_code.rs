//! The Claude Code provider driving a scripted `claude` executable (a real subprocess).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use strata_engine::ToolFilter;
use strata_engine::config::LlmConfig;
use strata_engine::llm::{ChatMessage, CompletionRequest, LlmError, LlmProvider, Role};
use strata_llm::AgentContext;

fn script() -> PathBuf {
    strata_test_support::fixture("fake-claude")
}

struct Setup {
    dir: tempfile::TempDir,
    provider: std::sync::Arc<dyn LlmProvider>,
}

impl Setup {
    /// A provider whose `command` is a wrapper that points the fake's log into this test's
    /// temp dir (no test mutates its own process environment).
    fn new(timeout_secs: u64) -> Self {
        Self::with(timeout_secs, |_, _| {})
    }

    /// As `new`, with the config and context changed by `edit` before the provider is built.
    fn with(timeout_secs: u64, edit: impl FnOnce(&mut LlmConfig, &mut AgentContext)) -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let wrapper = dir.path().join("claude");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexport FAKE_CLAUDE_LOG='{}'\nexec '{}' \"$@\"\n",
                dir.path().join("claude.log").display(),
                script().display()
            ),
        )
        .expect("wrapper");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        let mut c = LlmConfig::new("claude-code");
        c.command = Some(wrapper.display().to_string());
        c.model = Some("sonnet".into());
        c.timeout_secs = Some(timeout_secs);
        let mut ctx = AgentContext {
            agent_id: "main".into(),
            project_dir: dir.path().join("project"),
            tools: ToolFilter::List(vec!["read_file".into()]),
            registry_tools: vec!["list_files".into(), "read_file".into()],
            mcp_config: None,
            protected_paths: vec![
                dir.path().join("data"),
                dir.path().join("config/secrets.enc"),
            ],
            settings_file: Some(dir.path().join("data/claude-code/main.settings.json")),
            alerts: None,
        };
        edit(&mut c, &mut ctx);
        let provider = strata_llm::build(&c, None, "agents.main.llm", &ctx).expect("provider");
        Setup { dir, provider }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("claude.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    async fn ask(
        &self,
        text: &str,
        state: Option<serde_json::Value>,
    ) -> Result<strata_engine::llm::CompletionResponse, LlmError> {
        let req = CompletionRequest {
            model: "sonnet".into(),
            system: Some("You are main.".into()),
            messages: vec![ChatMessage::text(Role::User, text)],
            provider_state: state,
            ..Default::default()
        };
        self.provider.complete(&req).await
    }
}

#[tokio::test]
async fn a_turn_runs_the_cli_with_the_agents_policy_and_a_clean_environment() {
    let s = Setup::new(30);
    let r = s.ask("hello there", None).await.expect("turn");
    assert_eq!(r.message.content, "echo: hello there");
    // The CLI's usage as it reported it: cache tokens apart from input_tokens, and its cost.
    assert_eq!(
        (
            r.usage.input_tokens,
            r.usage.output_tokens,
            r.usage.cached_input_tokens,
            r.usage.cache_write_tokens,
            r.usage.cost_usd
        ),
        (21 + 100 + 30, 7, 100, 30, Some(0.001))
    );
    let sid = r
        .provider_state
        .as_ref()
        .and_then(|v| v["claude_session_id"].as_str())
        .expect("session")
        .to_owned();
    assert!(sid.starts_with("sess-"));

    // Next turn resumes the CLI session.
    let r2 = s
        .ask("second", r.provider_state.clone())
        .await
        .expect("turn");
    assert_eq!(r2.message.content, "echo: second");
    let log = s.log();
    let args: Vec<&str> = log.lines().filter(|l| l.starts_with("ARGS:")).collect();
    let first = args
        .iter()
        .find(|a| !a.contains("--resume"))
        .expect("fresh run");
    assert!(
        first.contains("--print --output-format stream-json --verbose --model sonnet"),
        "{first}"
    );
    let argv = first_argv(&log);
    assert_eq!(
        flag(&argv, "--allowedTools").as_deref(),
        Some("mcp__strata__read_file")
    );
    let denied = flag(&argv, "--disallowedTools").expect("--disallowedTools");
    assert!(denied.ends_with(",mcp__strata__list_files"), "{denied}");
    assert!(!first.contains("--mcp-config"), "no MCP endpoint yet");
    assert!(
        args.iter().any(|a| a.contains(&format!("--resume {sid}"))),
        "{args:?}"
    );
    assert!(log.contains(&format!("CWD: {}", s.dir.path().join("project").display())));
    // Only allow-listed variables reach the CLI: cargo's own (present in this process) do not.
    assert!(std::env::vars().any(|(k, _)| k.starts_with("CARGO")));
    let leaked: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.starts_with("ENV: CARGO")
                || l.starts_with("ENV: RUST")
                || l.starts_with("ENV: NEXTEST")
        })
        .collect();
    assert!(leaked.is_empty(), "{leaked:?}");
    assert!(log.contains("PROMPT-LAST-LINE: second"));
}

/// The first run's arguments as the fake logged them, one by one (empty ones kept).
fn first_argv(log: &str) -> Vec<String> {
    let line = log
        .lines()
        .find(|l| l.starts_with("ARGV:"))
        .expect("an ARGV line");
    line.trim_start_matches("ARGV: [")
        .trim_end_matches(']')
        .split("] [")
        .map(str::to_owned)
        .collect()
}

/// The value after `name`, if it was passed.
fn flag(argv: &[String], name: &str) -> Option<String> {
    argv.iter()
        .position(|a| a == name)
        .and_then(|i| argv.get(i + 1).cloned())
}

/// What the fake CLI offered the model, as a real one decides from the flags.
fn offered(log: &str) -> Vec<String> {
    let line = log
        .lines()
        .find(|l| l.starts_with("TOOLS:"))
        .expect("a TOOLS line");
    line.trim_start_matches("TOOLS:")
        .trim()
        .split(',')
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The protected paths are denied to every file tool in every mode, and the checks cannot
/// be switched off.
fn assert_settings_protect(s: &Setup) {
    let file = s.dir.path().join("data/claude-code/main.settings.json");
    let argv = first_argv(&s.log());
    assert_eq!(flag(&argv, "--settings").as_deref(), file.to_str());
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("settings file"))
            .expect("json");
    let deny: Vec<&str> = doc["permissions"]["deny"]
        .as_array()
        .expect("deny")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    let data = s.dir.path().join("data");
    let data = data.to_str().expect("utf8").trim_start_matches('/');
    for tool in ["Read", "Edit", "Write"] {
        for rule in [
            format!("{tool}(//{data}/**)"),
            format!("{tool}(**/*.pem)"),
            format!("{tool}(~/.ssh/**)"),
        ] {
            assert!(
                deny.contains(&rule.as_str()),
                "{rule} missing from {deny:?}"
            );
        }
        let vault = format!(
            "{tool}(/{})",
            s.dir.path().join("config/secrets.enc").display()
        );
        assert!(deny.contains(&vault.as_str()), "{vault} missing");
    }
    assert_eq!(
        doc["permissions"]["disableBypassPermissionsMode"],
        "disable"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn builtins_none_gives_the_cli_no_tool_of_its_own() {
    let s = Setup::new(30);
    s.ask("hello", None).await.expect("turn");
    let log = s.log();
    let argv = first_argv(&log);
    assert_eq!(flag(&argv, "--tools").as_deref(), Some(""), "{argv:?}");
    let denied = flag(&argv, "--disallowedTools").expect("denied");
    for b in ["Bash", "Read", "Write", "WebFetch", "Task"] {
        assert!(
            denied.split(',').any(|d| d == b),
            "{b} not denied: {denied}"
        );
    }
    assert!(argv.iter().any(|a| a == "--strict-mcp-config"));
    assert_eq!(offered(&log), ["mcp__strata__read_file"]);
    assert_settings_protect(&s);
}

#[tokio::test]
async fn builtins_read_only_gives_the_three_readers_and_nothing_that_writes_or_fetches() {
    let s = Setup::with(30, |c, _| {
        c.builtins = Some(strata_engine::config::Builtins::ReadOnly);
    });
    s.ask("hello", None).await.expect("turn");
    let log = s.log();
    let argv = first_argv(&log);
    assert_eq!(flag(&argv, "--tools").as_deref(), Some("Read,Glob,Grep"));
    assert_eq!(
        offered(&log),
        ["Read", "Glob", "Grep", "mcp__strata__read_file"]
    );
    let allowed = flag(&argv, "--allowedTools").expect("allowed");
    assert!(allowed.starts_with("Read,Glob,Grep,"), "{allowed}");
    assert!(argv.iter().any(|a| a == "--strict-mcp-config"));
    assert_settings_protect(&s);
}

#[tokio::test]
async fn builtins_all_keeps_the_deny_rules_and_disallow_builtins_takes_some_away() {
    let s = Setup::with(30, |c, _| {
        c.builtins = Some(strata_engine::config::Builtins::All);
        c.disallow_builtins = vec!["WebFetch".into(), "WebSearch".into()];
    });
    s.ask("hello", None).await.expect("turn");
    let log = s.log();
    let argv = first_argv(&log);
    assert_eq!(flag(&argv, "--tools"), None);
    let tools = offered(&log);
    assert!(tools.iter().any(|t| t == "Bash"), "{tools:?}");
    assert!(!tools.iter().any(|t| t.starts_with("Web")), "{tools:?}");
    let allowed = flag(&argv, "--allowedTools").expect("allowed");
    assert!(!allowed.split(',').any(|t| t == "WebFetch"), "{allowed}");
    assert!(!argv.iter().any(|a| a == "--strict-mcp-config"));
    assert_settings_protect(&s);
}

#[tokio::test]
async fn without_a_settings_file_the_rules_go_on_the_command_line() {
    let s = Setup::with(30, |_, ctx| ctx.settings_file = None);
    s.ask("hello", None).await.expect("turn");
    let argv = first_argv(&s.log());
    let inline = flag(&argv, "--settings").expect("--settings");
    let doc: serde_json::Value = serde_json::from_str(&inline).expect("a JSON document");
    let data = s.dir.path().join("data");
    let rule = format!(
        "Read(//{}/**)",
        data.to_str().expect("utf8").trim_start_matches('/')
    );
    assert!(
        doc["permissions"]["deny"]
            .as_array()
            .expect("deny")
            .iter()
            .any(|r| r == &serde_json::Value::String(rule.clone())),
        "{rule}"
    );
}

#[tokio::test]
async fn a_lost_session_is_dropped_and_retried_fresh() {
    let s = Setup::new(30);
    let r = s
        .ask("GONE now", Some(json!({"claude_session_id": "stale-1"})))
        .await
        .expect("retried");
    assert_eq!(r.message.content, "echo: GONE now");
    assert_ne!(
        r.provider_state.expect("state")["claude_session_id"],
        "stale-1"
    );
}

#[tokio::test]
async fn errors_are_classified() {
    let s = Setup::new(30);
    let e = s.ask("please ERROR", None).await.expect_err("error");
    assert!(
        e.to_string()
            .contains("error_during_execution: tool crashed"),
        "{e}"
    );
    let e = s.ask("LIMIT", None).await.expect_err("limit");
    assert!(e.to_string().contains("usage limit reached"), "{e}");
    let e = s.ask("AUTH", None).await.expect_err("auth");
    assert!(
        matches!(&e, LlmError::Auth { config_key, .. } if config_key == "agents.main.llm.api_key"),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_hang_hits_the_timeout_and_leaves_no_process_behind() {
    let s = Setup::new(1);
    let started = std::time::Instant::now();
    let e = s.ask("HANG forever", None).await.expect_err("timeout");
    assert!(e.to_string().contains("timed out after 1s"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let child: i32 = std::fs::read_to_string(format!("{}.child", s.log_path().display()))
        .expect("child pid")
        .trim()
        .parse()
        .expect("pid");
    // The grandchild `sleep` was in the killed process group: give the kernel a moment.
    let mut gone = false;
    for _ in 0..50 {
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting for init to reap it.
        if stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "sleep {child} survived the timeout");
}

#[tokio::test]
async fn a_missing_executable_says_how_to_fix_it() {
    let mut c = LlmConfig::new("claude-code");
    c.command = Some("/definitely/not/claude".into());
    let p = strata_llm::build(&c, None, "agents.main.llm", &AgentContext::bare("main")).expect("p");
    let e = p
        .complete(&CompletionRequest {
            model: String::new(),
            ..Default::default()
        })
        .await
        .expect_err("missing");
    assert!(e.to_string().contains("agents.main.llm.command"), "{e}");
}

#[tokio::test]
async fn check_runs_the_cli_and_says_what_is_wrong() {
    let ok = Setup::new(10);
    let msg = ok.provider.check().await.expect("a working CLI passes");
    assert!(msg.contains("1.0.0 (Claude Code)"), "{msg}");

    // An installed CLI that fails: its exit status and stderr are the message.
    let broken = ok.dir.path().join("broken-claude");
    std::fs::write(
        &broken,
        format!(
            "#!/bin/sh\nexport FAKE_CLAUDE_BROKEN=1\nexec '{}' \"$@\"\n",
            script().display()
        ),
    )
    .expect("wrapper");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let mut c = LlmConfig::new("claude-code");
    c.command = Some(broken.display().to_string());
    let p = strata_llm::build(&c, None, "defaults.llm", &AgentContext::bare("main")).expect("p");
    let e = p.check().await.expect_err("broken");
    let e = e.to_string();
    assert!(
        e.contains("exit status: 3") && e.contains("broken install"),
        "{e}"
    );

    // No such executable: where to set it.
    c.command = Some("/definitely/not/claude".into());
    let p = strata_llm::build(&c, None, "defaults.llm", &AgentContext::bare("main")).expect("p");
    let e = p.check().await.expect_err("missing").to_string();
    assert!(e.contains("defaults.llm.command"), "{e}");
    // A check never starts a conversation.
    assert!(ok.log().is_empty(), "{}", ok.log());
}

/// Keeps the audit log's events (the alerts).
#[derive(Default)]
struct Events(std::sync::Mutex<Vec<serde_json::Value>>);

impl strata_engine::audit::AuditSink for Events {
    fn record(&self, _r: &strata_engine::audit::AuditRecord) {}
    fn event(&self, e: &serde_json::Value) {
        self.0.lock().expect("lock").push(e.clone());
    }
}

/// A tool the CLI refused is a permissions alert saying what to change, once per cooldown.
#[tokio::test]
async fn refused_tools_are_reported_once_with_the_setting_to_change() {
    let events = std::sync::Arc::new(Events::default());
    let env = std::sync::Arc::new(strata_engine::Env::new(
        strata_engine::config::Config::default(),
        ".".into(),
        "./data".into(),
    ));
    let invoker = std::sync::Arc::new(strata_runtime::Invoker::new(
        std::sync::Arc::new(strata_runtime::Registry::empty()),
        env,
        events.clone(),
    ));
    let s = Setup::with(30, |_, ctx| ctx.alerts = Some(invoker));
    for _ in 0..2 {
        let r = s.ask("DENIED please", None).await.expect("answer");
        assert_eq!(r.message.content, "I could not run that.");
    }
    let alerts: Vec<serde_json::Value> = events
        .0
        .lock()
        .expect("lock")
        .iter()
        .filter(|e| e["kind"] == "permissions")
        .cloned()
        .collect();
    assert_eq!(
        alerts.len(),
        2,
        "one per refused tool, not per turn: {alerts:?}"
    );
    let text = serde_json::Value::Array(alerts).to_string();
    assert!(
        text.contains("`Bash`") && text.contains("agents.main.llm.builtins: all"),
        "{text}"
    );
    assert!(
        text.contains("add `write_file` to `agents.main.tools`"),
        "{text}"
    );
}

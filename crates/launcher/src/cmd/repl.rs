//! `strata repl`: a terminal connector with line editing and history.

use std::sync::Arc;

use rustyline::error::ReadlineError;
use strata_engine::Principal;
use strata_engine::agent::Message;
use strata_engine::config::LoadedConfig;
use strata_engine::turns::TurnRequest;
use strata_runtime::Registry;

use crate::Exit;

const HELP: &str = "/reset  forget this session   /skills  list skills   /quit  leave";

pub(crate) fn run(
    cfg: &LoadedConfig,
    registry: Arc<Registry>,
    agent: Option<String>,
    session: &str,
) -> Exit {
    let agent_id = match agent.map_or_else(|| crate::wiring::default_agent(cfg), Ok) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Failure;
        }
    };
    let wired = match rt.block_on(crate::wiring::build(cfg, registry, None)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Exit::Failure;
        }
    };
    wired
        .approvals
        .add_channel(std::sync::Arc::new(crate::wiring::StderrApprovals));
    if let Some((_, why)) = wired.skipped.iter().find(|(id, _)| *id == agent_id) {
        eprintln!("error: agent `{agent_id}` cannot start: {why}");
        return Exit::Failure;
    }
    if wired.manager.agent(&agent_id).is_none() {
        eprintln!("error: unknown agent `{agent_id}`");
        return Exit::Usage;
    }
    let skills = strata_runtime::skills::SkillSet::load(strata_runtime::skills::dirs_for(cfg));
    let mut editor = match rustyline::DefaultEditor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: cannot open the terminal: {e}");
            return Exit::Failure;
        }
    };
    let history = cfg.data_dir.join("repl_history");
    let _ = editor.load_history(&history);
    // The tools of `config/mcp.yaml`'s servers, as in `serve`; stopped when the repl ends.
    let servers = rt.block_on(crate::wiring::McpServers::start(
        cfg,
        wired.invoker.registry().clone(),
        wired.invoker.env(),
    ));
    println!("strata repl: agent `{agent_id}`, session `{session}`. {HELP}");
    let prompt = "you> ";
    loop {
        let line = match editor.readline(prompt) {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("error: {e}");
                break;
            }
        };
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(text);
        match text {
            "/quit" | "/exit" => break,
            "/help" => println!("{HELP}"),
            "/reset" => match rt.block_on(wired.manager.reset(&agent_id, session)) {
                Ok(()) => println!("(session reset)"),
                Err(e) => println!("error: {e}"),
            },
            "/skills" => println!("{}", crate::cmd::skill::list(&skills, false)),
            t if t.starts_with('/') => println!("unknown command {t}; {HELP}"),
            t => {
                let prefix = format!("{agent_id}> ");
                let live = super::context::LivePrinter::new(&prefix);
                let reply = rt.block_on(wired.manager.turn(TurnRequest {
                    agent_id: agent_id.clone(),
                    session_id: session.to_owned(),
                    stream: Some(live.sink()),
                    scopes: Vec::new(),
                    channel_kind: None,
                    channel_id: "repl".into(),
                    sender: Principal::Operator,
                    message: Message::text(t),
                    depth: 0,
                    taint: None,
                    turn_id: None,
                }));
                match reply {
                    Ok(r) if r.silent => {
                        live.finish(&prefix, None);
                        println!("({agent_id} chose not to reply)");
                    }
                    Ok(r) => live.finish(&prefix, Some(&r.text)),
                    Err(e) => {
                        live.finish(&prefix, None);
                        println!("error: {e}");
                    }
                }
            }
        }
    }
    if let Err(e) = editor.save_history(&history) {
        tracing::debug!(error = %e, "history not saved");
    }
    rt.block_on(servers.stop());
    rt.block_on(wired.finish());
    Exit::Ok
}

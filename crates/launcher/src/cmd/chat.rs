//! `strata chat`: one turn.

use std::sync::Arc;

use strata_engine::Principal;

use super::context::*;
use crate::Exit;

pub(crate) fn chat(l: &Context, agent: Option<String>, session: &str, message: String) -> Exit {
    // Nothing to say is not sent to a model (nor stored as a turn).
    if message.trim().is_empty() {
        eprintln!("error: the message is empty; say something, e.g. strata chat \"hello\"");
        return Exit::Usage;
    }
    let agent_id = match agent.map_or_else(|| crate::wiring::default_agent(&l.config), Ok) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Usage;
        }
    };
    if !l.config.config.agents.contains_key(&agent_id) {
        let ids: Vec<&str> = l.config.config.agents.keys().map(String::as_str).collect();
        eprintln!(
            "error: unknown agent `{agent_id}`; agents: {}",
            if ids.is_empty() {
                "none".to_owned()
            } else {
                ids.join(", ")
            }
        );
        return Exit::Usage;
    }
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    // On a terminal the answer appears as it is written; piped, only the reply is printed.
    let thinking = format!("{agent_id} is thinking");
    let live = std::io::IsTerminal::is_terminal(&std::io::stdout())
        .then(|| LivePrinter::waiting("", Some(thinking.clone())));
    // Piped, the spinner (on a terminal's stderr) lasts until the answer is whole.
    let spinner = live.is_none().then(|| Progress::start(thinking));
    let result = rt.block_on(async {
        let wired = crate::wiring::build(&l.config, l.registry.clone(), None).await?;
        wired
            .approvals
            .add_channel(Arc::new(crate::wiring::StderrApprovals));
        if let Some((_, why)) = wired.skipped.iter().find(|(id, _)| *id == agent_id) {
            anyhow::bail!("agent `{agent_id}` cannot start: {why}");
        }
        // The tools of `config/mcp.yaml`'s servers, as in `serve`.
        let servers =
            crate::wiring::McpServers::start(&l.config, l.registry.clone(), wired.invoker.env())
                .await;
        let reply = wired
            .manager
            .turn(strata_engine::turns::TurnRequest {
                agent_id: agent_id.clone(),
                session_id: session.to_owned(),
                stream: live.as_ref().map(LivePrinter::sink),
                scopes: Vec::new(),
                channel_kind: None,
                channel_id: "cli".into(),
                sender: Principal::Operator,
                message: strata_engine::agent::Message::text(message),
                depth: 0,
                taint: None,
                turn_id: None,
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e}"));
        servers.stop().await;
        // The turn's model calls reach the store before the process ends.
        wired.finish().await;
        reply
    });
    drop(spinner);
    match (result, live) {
        (Ok(reply), live) if reply.silent => {
            if let Some(l) = live {
                l.finish("", None);
            }
            eprintln!("({agent_id} chose not to reply)");
            Exit::Ok
        }
        (Ok(reply), Some(l)) => {
            l.finish("", Some(&reply.text));
            Exit::Ok
        }
        (Ok(reply), None) => out(&reply.text),
        (Err(e), live) => {
            if let Some(l) = live {
                l.finish("", None);
            }
            fail(&e)
        }
    }
}

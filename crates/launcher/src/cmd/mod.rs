//! The subcommands, one file each (as cargo lays out its own), and the dispatch between
//! them. `context.rs` holds what they share.

mod audit;
mod chat;
mod cluster;
mod config;
pub(crate) mod context;
mod doctor;
mod goal;
mod integrity;
mod mcp;
pub(crate) mod memory;
pub(crate) mod repl;
mod schedule;
pub(crate) mod security;
mod serve;
pub mod skill;
mod status;
mod storage;
mod tools;
mod turns;
mod usage;
mod vault;

use crate::cli::{
    ApprovalsCommand, AuditCommand, Cli, Command, ConfigCommand, McpCommand, SafetyCommand,
};
use crate::{Exit, Launcher};
use context::{fail, init_logging, load, parse_args_json};

/// Commands aimed at a running server (`--remote`) need no local overlay.
fn dispatch_remote(cli: &Cli) -> Option<Exit> {
    let pick = |r: &crate::cli::RemoteArgs| match (&r.remote, &r.token) {
        (Some(u), Some(t)) => Some((u.clone(), t.clone())),
        _ => None,
    };
    match &cli.command {
        Command::Tools { json, remote } => {
            pick(remote).map(|(u, t)| crate::remote::tools(&u, &t, *json))
        }
        Command::Inspect { tool, remote, .. } => {
            pick(remote).map(|(u, t)| crate::remote::inspect(&u, &t, tool))
        }
        Command::Events {
            limit,
            follow,
            remote,
        } => pick(remote).map(|(u, t)| crate::remote::events(&u, &t, *limit, *follow)),
        Command::Invoke {
            tool,
            args,
            request_id,
            json,
            remote,
        } => pick(remote).map(|(u, t)| match parse_args_json(args) {
            Ok(a) => crate::remote::invoke(&u, &t, tool, a, request_id.clone(), *json),
            Err(e) => {
                eprintln!("error: {e}");
                Exit::Usage
            }
        }),
        Command::Approvals { command } => {
            let r = match command {
                ApprovalsCommand::List { remote, .. }
                | ApprovalsCommand::Approve { remote, .. }
                | ApprovalsCommand::Deny { remote, .. } => remote,
            };
            pick(r).map(|(u, t)| crate::remote::approvals(&u, &t, command))
        }
        _ => None,
    }
}

/// The completion script for `shell`, for the name this binary was run as (`strata`, or a
/// deployment's own such as `strata-example`).
fn completions(shell: clap_complete::Shell) -> Exit {
    use clap::CommandFactory;
    let name = std::env::args_os()
        .next()
        .as_deref()
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "strata".to_owned());
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, name, &mut std::io::stdout());
    Exit::Ok
}

pub(crate) fn dispatch(launcher: &Launcher, cli: Cli) -> Exit {
    if let Some(exit) = dispatch_remote(&cli) {
        return exit;
    }
    // What needs no overlay: completions, and the schema (most wanted when the config does
    // not load).
    if let Command::Completions { shell } = &cli.command {
        return completions(*shell);
    }
    if let Command::Config {
        command: ConfigCommand::Schema { file },
    } = &cli.command
    {
        return config::config_schema(*file);
    }
    let quiet = !matches!(cli.command, Command::Serve);
    // CLI commands keep stdout for their output and stderr for warnings only.
    if quiet {
        init_logging(&cli.global.log_level("warn"), false, None);
    }
    context::set_quiet(cli.global.quiet);
    let loaded = match load(launcher, &cli.global) {
        Ok(l) => l,
        Err(e) => {
            if matches!(cli.command, Command::Doctor { .. }) {
                println!("FAIL config: {e:#}");
                return Exit::Failure;
            }
            return fail(&e);
        }
    };
    match cli.command {
        Command::Serve => serve::serve(loaded, &cli.global).unwrap_or_else(|e| fail(&e)),
        Command::Tools { json, .. } => tools::tools(&loaded, json),
        Command::Inspect { tool, json, .. } => tools::inspect(&loaded, &tool, json),
        Command::Events { limit, follow, .. } => audit::events(&loaded, limit, follow),
        Command::Invoke {
            tool,
            args,
            request_id,
            json,
            ..
        } => tools::invoke(loaded, &tool, &args, request_id, json),
        Command::Config {
            command: ConfigCommand::Show { origin, json },
        } => config::config_show(&loaded, origin, json),
        Command::Config {
            command: ConfigCommand::Schema { file },
        } => config::config_schema(file),
        Command::Completions { shell } => completions(shell),
        Command::Doctor { online } => doctor::doctor(&loaded, online),
        Command::Vault { command } => vault::vault(&loaded, command),
        Command::Chat {
            agent,
            session,
            message,
        } => chat::chat(&loaded, agent, &session, message),
        Command::Skill { command } => skill::skill(&loaded, command),
        Command::Audit {
            command: AuditCommand::Verify { file },
        } => audit::audit_verify(&loaded, file),
        Command::Mcp {
            command: McpCommand::Serve { stdio },
        } => mcp::mcp_stdio(&loaded, stdio),
        Command::Approvals { command } => security::approvals(Some(&loaded), command),
        Command::Memory { command } => memory::run(&loaded, command),
        Command::Storage { command } => storage::run(&loaded, command),
        Command::Cluster { command } => cluster::run(&loaded, command),
        Command::Schedule { command } => schedule::run(&loaded, command),
        Command::Goal { command } => goal::run(&loaded, command),
        Command::Turns { command } => turns::run(&loaded, command),
        Command::Integrity { command } => integrity::run(&loaded, command),
        Command::Status { remote, json } => status::run(&loaded, &remote, json),
        Command::Usage {
            by,
            since,
            turn,
            json,
        } => usage::run(&loaded, &by, since.as_deref(), turn, json),
        Command::Safety {
            command: SafetyCommand::Scan { input, json, jsonl },
        } => security::safety_scan(&loaded, &input, json, jsonl),
        Command::Repl { agent, session } => {
            repl::run(&loaded.config, loaded.registry.clone(), agent, &session)
        }
    }
}

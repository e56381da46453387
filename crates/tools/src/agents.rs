//! Inter-agent tools (`ask_agent`, `send_to_agent`) and `list_capabilities`.

use serde_json::{Value, json};
use strata_engine::agent::Message;
use strata_engine::turns::TurnRequest;
use strata_engine::{Principal, ToolContext, ToolError, tool};
use strata_runtime::EnvExt;

/// Inter-agent calls stop here: a turn at this depth is never started.
const MAX_DEPTH: u32 = 3;

/// One inter-agent hop that passed the rules: who runs the turn, for whom, how deep.
struct Hop {
    dir: std::sync::Arc<dyn strata_engine::turns::AgentDirectory>,
    agent: String,
    sender: Principal,
    depth: u32,
    /// The asking turn's taint, which the asked turn shares (`security.taint.sources: agents`).
    taint: Option<strata_engine::Taint>,
}

impl Hop {
    fn request(
        self,
        session: String,
        channel: String,
        text: String,
        turn_id: Option<String>,
    ) -> (
        std::sync::Arc<dyn strata_engine::turns::AgentDirectory>,
        TurnRequest,
    ) {
        (
            self.dir,
            TurnRequest {
                agent_id: self.agent,
                session_id: session,
                stream: None,
                scopes: Vec::new(),
                channel_kind: None,
                channel_id: channel,
                sender: self.sender,
                message: Message::text(text),
                depth: self.depth,
                taint: self.taint,
                turn_id,
            },
        )
    }

    /// Runs the target's turn on `text` in `session` (also its channel id) and waits for it,
    /// as unit of work `turn_id` (a resumed caller asking again gets the same turn's answer).
    async fn run(
        self,
        session: String,
        channel: String,
        text: String,
        turn_id: Option<String>,
    ) -> Result<strata_engine::agent::Reply, strata_engine::agent::AgentError> {
        let (dir, req) = self.request(session, channel, text, turn_id);
        dir.run_turn(req).await
    }

    /// Hands the target's turn to whoever runs shared work (the cluster's queue), as one
    /// unit of work with the id `send_to_agent:<receipt>`: run once, wherever, even if this
    /// instance stops.
    async fn deliver(
        self,
        env: &strata_engine::Env,
        session: String,
        channel: String,
        text: String,
        receipt: &str,
    ) -> Result<Delivery, ToolError> {
        let turn_id = format!("send_to_agent:{receipt}");
        let (dir, req) = self.request(session, channel, text, Some(turn_id.clone()));
        // Journaled before the receipt is handed out: a crash before the turn runs does not
        // lose the message (the next start runs it).
        if let Some(j) = env.journal() {
            j.accept(&turn_id, &strata_runtime::journal::TurnStart::of(&req))
                .await
                .map_err(|e| {
                    ToolError::failed(format!(
                        "the message was not taken: the turn journal is unavailable ({e})"
                    ))
                })?;
        }
        Ok(Box::pin(async move { dir.deliver(req).await }))
    }
}

/// An accepted `send_to_agent` turn, to run.
type Delivery = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<strata_engine::agent::Reply, strata_engine::agent::AgentError>,
            > + Send,
    >,
>;

/// A receipt (or a side session's suffix) for this call: from its idempotency key in a
/// journaled turn, so a resumed caller names the same unit of work; fresh otherwise.
fn call_id(ctx: &ToolContext) -> uuid::Uuid {
    ctx.idempotency_key()
        .and_then(|k| uuid::Uuid::try_parse(k).ok())
        .unwrap_or_else(uuid::Uuid::new_v4)
}

/// Checks the common rules for a hop to `agent`.
fn prepare(ctx: &ToolContext, agent: &str) -> Result<Hop, ToolError> {
    let dir = ctx
        .env
        .agents()
        .ok_or_else(|| ToolError::failed("no agents are running in this process"))?;
    if !dir.agent_ids().iter().any(|a| a == agent) {
        return Err(ToolError::invalid(
            "agent",
            format!("no agent `{agent}`; agents: {}", dir.agent_ids().join(", ")),
        ));
    }
    // The calling agent: the turn's agent, or the agent whose own token made the call.
    let caller = ctx.agent_id.as_deref().or(match &ctx.principal {
        Principal::Agent { id } => Some(id.as_str()),
        _ => None,
    });
    if caller == Some(agent) {
        return Err(ToolError::invalid(
            "agent",
            "an agent cannot message itself",
        ));
    }
    let depth = ctx.depth + 1;
    if depth >= MAX_DEPTH {
        return Err(ToolError::failed(format!(
            "inter-agent depth limit reached ({MAX_DEPTH}): this request came through {} agents already",
            ctx.depth
        )));
    }
    let sender = match &ctx.agent_id {
        Some(a) => Principal::Agent { id: a.clone() },
        None => ctx.principal.clone(),
    };
    let taint = ctx
        .taint
        .clone()
        .filter(|_| ctx.config().security.taint.follows_agents());
    Ok(Hop {
        dir,
        agent: agent.to_owned(),
        sender,
        depth,
        taint,
    })
}

/// Asks another agent a question and waits for its answer. The other agent answers in a
/// private side session (nobody else sees the exchange). Use it for questions another agent
/// is better placed to answer; not for chatting.
// Idempotent: the asked turn's id and side session come from the call's idempotency key, so
// a resumed turn asking again gets that turn's stored answer, or continues its journal.
#[tool(capabilities = [messaging], side_effects = local, idempotent, timeout_secs = 300)]
async fn ask_agent(
    ctx: &ToolContext,
    /// The agent's id.
    agent: String,
    /// The question, self-contained (the other agent does not see your conversation).
    question: String,
) -> Result<Value, ToolError> {
    if question.trim().is_empty() {
        return Err(ToolError::invalid("question", "must not be empty"));
    }
    let hop = prepare(ctx, &agent)?;
    let id = call_id(ctx);
    let session = format!("ask-{}-{id}", ctx.agent_id.as_deref().unwrap_or("operator"),);
    let turn_id = ctx.idempotency_key().map(|k| format!("ask_agent:{k}"));
    let reply = hop
        .run(session.clone(), session, question, turn_id)
        .await
        .map_err(|e| ToolError::failed(format!("`{agent}` could not answer: {e}")))?;
    Ok(json!({"agent": agent, "answer": if reply.silent { String::new() } else { reply.text }}))
}

/// Sends a message to another agent without waiting for its answer; returns a delivery
/// receipt. The message is posted visibly in the agent's channel (its home channel, else the
/// first it is routed to, else the one it last talked in) and its reply goes there too; when
/// none is available it goes to a side session of the agent's own (the receipt says which).
#[tool(capabilities = [messaging], side_effects = local, timeout_secs = 30)]
async fn send_to_agent(
    ctx: &ToolContext,
    /// The agent's id.
    agent: String,
    /// The message, self-contained.
    message: String,
) -> Result<Value, ToolError> {
    if message.trim().is_empty() {
        return Err(ToolError::invalid("message", "must not be empty"));
    }
    let hop = prepare(ctx, &agent)?;
    let receipt = call_id(ctx).to_string();
    let hub = ctx.env.connectors().clone();
    let mut fallback_reason = "no home channel, routed channel or earlier conversation channel \
                               of this agent is available"
        .to_owned();
    if let Some((home, resolved_by)) = find_home(ctx, &hub, &agent).await {
        let from = ctx.agent_id.as_deref().unwrap_or("the operator");
        match hub
            .send(
                &home,
                &format!("[message from {from} to {agent}] {message}"),
                None,
            )
            .await
        {
            Ok(()) => {
                let (a, r, h) = (agent.clone(), receipt.clone(), home.clone());
                let turn = hop
                    .deliver(&ctx.env, h.session_id(), h.to_string(), message, &r)
                    .await?;
                tokio::spawn(async move {
                    match turn.await {
                        Ok(reply) if !reply.silent && !reply.text.trim().is_empty() => {
                            if let Err(e) = hub.send(&h, &reply.text, None).await {
                                tracing::warn!(agent = %a, receipt = %r, error = %e, "send_to_agent: posting the reply failed");
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(agent = %a, receipt = %r, error = %e, "send_to_agent delivery failed");
                        }
                    }
                });
                return Ok(json!({
                    "receipt": receipt,
                    "agent": agent,
                    "delivery": "home_channel",
                    "channel": home.to_string(),
                    "resolved_by": resolved_by,
                }));
            }
            Err(e) => {
                fallback_reason = format!("posting to its channel {home} failed ({e})");
            }
        }
    }
    let session = format!("inbox-{agent}");
    let (a, r) = (agent.clone(), receipt.clone());
    let s2 = session.clone();
    let turn = hop.deliver(&ctx.env, s2.clone(), s2, message, &r).await?;
    tokio::spawn(async move {
        if let Err(e) = turn.await {
            tracing::warn!(agent = %a, receipt = %r, error = %e, "send_to_agent delivery failed");
        }
    });
    Ok(json!({
        "receipt": receipt,
        "agent": agent,
        "delivery": "side_session",
        "session": session,
        "note": format!("{fallback_reason}, so the message went to its side session `{session}`"),
    }))
}

/// Where a message for `agent` is posted, and how that was found: its `home_channel`, else
/// the first channel its routing names, else the shared channel it most recently talked in
/// (from the stored sessions, so it survives restarts) — each only while its connector runs.
async fn find_home(
    ctx: &ToolContext,
    hub: &strata_runtime::hub::ConnectorHub,
    agent: &str,
) -> Option<(strata_engine::connector::ChannelRef, &'static str)> {
    use strata_engine::connector::ChannelRef;
    if let Some(home) = hub.home(agent) {
        return Some((home, "home_channel"));
    }
    let running = |c: &ChannelRef| hub.get(&c.connector).is_some();
    if let Some(r) = ctx
        .env
        .config
        .agents
        .get(agent)
        .and_then(|a| a.routing.discord.as_ref())
        && let Some(first) = r.channels.as_ref().and_then(|c| c.first())
    {
        let c = ChannelRef {
            connector: format!("discord:{}", r.account),
            channel_id: first.clone(),
        };
        if running(&c) {
            return Some((c, "first_channel"));
        }
    }
    let directory = ctx.env.agents()?;
    for session in directory.recent_sessions(agent).await {
        let Some(c) = ChannelRef::parse(&session) else {
            continue;
        };
        if let Some(conn) = hub.get(&c.connector)
            && conn.is_group_channel(&c.channel_id).await
        {
            return Some((c, "recent_channel"));
        }
    }
    None
}

/// Posts a message in a channel through a running connector (Discord, …). `channel` is
/// `<connector>:<channel id>`, e.g. `discord:main:123456789012345678`.
///
/// Honours its idempotency key where the connector dedupes posts (Discord: the message
/// nonce with `enforce_nonce`); through one that does not, a call run again after a crash
/// posts nothing and says the first post's outcome is unknown.
#[tool(capabilities = [messaging], side_effects = external, idempotent, timeout_secs = 30)]
async fn send_message(
    ctx: &ToolContext,
    /// `<connector>:<channel id>`.
    channel: String,
    /// The text (the connector splits long messages).
    text: String,
) -> Result<Value, ToolError> {
    if text.trim().is_empty() {
        return Err(ToolError::invalid("text", "must not be empty"));
    }
    if text.chars().count() > 20_000 {
        return Err(ToolError::invalid("text", "longer than 20,000 characters"));
    }
    if strata_engine::agent::is_no_reply(&text) {
        return Err(ToolError::invalid("text", "NO_REPLY is never posted"));
    }
    let hub = ctx.env.connectors();
    let to = strata_engine::connector::ChannelRef::parse(&channel).ok_or_else(|| {
        ToolError::invalid(
            "channel",
            "use `<connector>:<channel id>`, e.g. `discord:main:1234`",
        )
    })?;
    if hub.get(&to.connector).is_none() {
        let names = hub.names();
        return Err(ToolError::invalid(
            "channel",
            format!(
                "no connector `{}` is running; running: {}",
                to.connector,
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            ),
        ));
    }
    if ctx.is_resumed_call() && !hub.dedupes_sends(&to) {
        return Err(ToolError::failed(format!(
            "not sent again: this post to {to} had started before Strata stopped, whether it \
             went out is unknown, and `{}` cannot tell a repeat from a new post",
            to.connector
        )));
    }
    hub.send_keyed(&to, &text, None, ctx.idempotency_key())
        .await
        .map_err(|e| ToolError::failed(format!("sending to {to} failed: {e}")))?;
    Ok(json!({"sent": true, "channel": to.to_string(), "chars": text.chars().count()}))
}

/// Lists what you can use here: the tools you may call (and which need a human's approval),
/// the agents you may talk to, and the skills of this deployment.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 10)]
async fn list_capabilities(ctx: &ToolContext) -> Result<Value, ToolError> {
    let env = &ctx.env;
    let policy = &ctx.policy;
    let mut tools = Vec::new();
    {
        for spec in ctx.tools.specs() {
            let spec = &spec;
            let d = policy.decide(&ctx.principal, ctx.agent_id.as_deref(), spec);
            let approval = match d {
                strata_engine::access::Decision::Deny { .. } => continue,
                strata_engine::access::Decision::Approve(_) => true,
                strata_engine::access::Decision::Allow => false,
            };
            let summary = spec
                .description
                .split(". ")
                .next()
                .unwrap_or("")
                .trim_end_matches('.');
            tools.push(json!({"name": spec.name, "summary": summary, "needs_approval": approval}));
        }
    }
    let me = match &ctx.agent_id {
        Some(a) => Principal::Agent { id: a.clone() },
        None => ctx.principal.clone(),
    };
    // The running agents when there are any, else the configured ones.
    let ids: Vec<String> = match env.agents() {
        Some(dir) => dir.agent_ids(),
        None => env.config.agents.keys().cloned().collect(),
    };
    let agents: Vec<Value> = ids
        .iter()
        .filter(|id| Some(id.as_str()) != ctx.agent_id.as_deref())
        .filter(|id| policy.may_talk(&me, id).is_ok())
        .map(|id| {
            let a = env.config.agents.get(id);
            json!({
                "id": id,
                "name": a.and_then(|a| a.name.clone()),
                "description": a.and_then(|a| a.description.clone()),
            })
        })
        .collect();
    let mut dirs = vec![env.overlay_dir.join("skills")];
    if let Ok(rd) = std::fs::read_dir(env.overlay_dir.join("agents")) {
        dirs.extend(rd.flatten().map(|e| e.path().join("skills")));
    }
    let mut skills: Vec<String> = Vec::new();
    for d in dirs {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                let p = e.path();
                if matches!(p.extension().and_then(|x| x.to_str()), Some("yaml" | "yml"))
                    && let Some(stem) = p.file_stem().and_then(|s| s.to_str())
                {
                    skills.push(stem.to_owned());
                }
            }
        }
    }
    skills.sort();
    skills.dedup();
    Ok(json!({"tools": tools, "agents": agents, "skills": skills}))
}

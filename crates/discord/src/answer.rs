//! Answering a routed message: typing, the turn through the agent directory, progress for
//! long turns, the reply split and posted with its attachments.

use std::sync::{Arc, Mutex};

use strata_engine::Principal;
use strata_engine::agent::{Message, is_no_reply};
use strata_engine::connector::{ChannelRef, Connector, InboundMessage, OutboundMessage};
use strata_engine::turns::{AgentDirectory, TurnRequest};
use tokio::sync::mpsc;
use twilight_model::id::Id;

use crate::attach::Attachments;
use crate::gateway::Progress;
use crate::{DiscordAccount, guards, live};

/// Runs `agent`'s turn for `msg` and posts the reply in the channel.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn answer(
    account: Arc<DiscordAccount>,
    files: Arc<Attachments>,
    guards: Arc<Mutex<guards::Guards>>,
    directory: Arc<dyn AgentDirectory>,
    progress: Option<Progress>,
    agent: String,
    msg: InboundMessage,
) {
    let channel = ChannelRef {
        connector: msg.connector.clone(),
        channel_id: msg.channel_id.clone(),
    };
    // Discord's message id: a message delivered twice (a gateway replay, a second instance
    // holding the account) is one turn, answered once.
    let turn_id = format!("discord:{}:{agent}", msg.message_id);
    // "Typing… while the agent works: once now, then every 8 s (Discord shows it ~10 s).
    let mut typing = None;
    if let Some(ch) = msg.channel_id.parse::<u64>().ok().and_then(Id::new_checked) {
        let _ = account.http.create_typing_trigger(ch).await;
        let http = account.http.clone();
        typing = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(8)).await;
                let _ = http.create_typing_trigger(ch).await;
            }
        }));
    }
    // A long turn gets a progress message naming the tools in use, edited as they change.
    let progress_msg: Arc<Mutex<Option<u64>>> = Arc::default();
    let progress_task = match (
        progress,
        msg.channel_id.parse::<u64>().ok().and_then(Id::new_checked),
    ) {
        (Some((board, after)), Some(ch)) => {
            let (http, agent, session, slot) = (
                account.http.clone(),
                agent.clone(),
                channel.session_id(),
                progress_msg.clone(),
            );
            Some(tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let text = |tools: &Option<String>| match tools {
                    Some(t) => format!("⏳ {agent} is working… (using `{t}`)"),
                    None => format!("⏳ {agent} is working…"),
                };
                let mut shown = board.get(&agent, &session);
                let Ok(resp) = http.create_message(ch).content(&text(&shown)).await else {
                    return;
                };
                let Ok(m) = resp.model().await else { return };
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(m.id.get());
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    let now = board.get(&agent, &session);
                    if now.is_some() && now != shown {
                        let _ = http
                            .update_message(ch, m.id)
                            .content(Some(&text(&now)))
                            .await;
                        shown = now;
                    }
                }
            }))
        }
        _ => None,
    };
    // The answer shown as it is written, in the channel the message came from.
    let (live_tx, live_rx) = mpsc::unbounded_channel();
    let channel_ref = msg.channel_id.parse::<u64>().ok().and_then(Id::new_checked);
    let reply_to = msg.message_id.parse::<u64>().ok().and_then(Id::new_checked);
    let live =
        channel_ref.map(|ch| tokio::spawn(live::follow(account.clone(), ch, reply_to, live_rx)));
    let reply = directory
        .run_turn(TurnRequest {
            agent_id: agent.clone(),
            session_id: channel.session_id(),
            stream: live
                .is_some()
                .then(|| strata_engine::turns::TurnSink::channel(live_tx)),
            scopes: Vec::new(),
            channel_kind: Some(match &msg.guild_id {
                Some(g) => format!("a Discord server channel (server {g}): others may read along"),
                None => "a Discord direct message: only this person reads along".to_owned(),
            }),
            channel_id: channel.to_string(),
            sender: Principal::Person {
                id: format!("discord:{}", msg.sender_id),
            },
            message: Message::text(msg.text.clone()),
            depth: 0,
            taint: None,
            turn_id: Some(turn_id.clone()),
        })
        .await;
    if let Some(t) = typing {
        t.abort();
    }
    if let Some(t) = progress_task {
        t.abort();
    }
    // The turn is over and has dropped its sink: the follower ends with what it posted.
    let mut streamed = match live {
        Some(task) => task.await.unwrap_or_default(),
        None => live::Shown::default(),
    };
    let shown = *progress_msg.lock().unwrap_or_else(|p| p.into_inner());
    if let (Some(m), Some(ch)) = (
        shown.and_then(Id::new_checked),
        msg.channel_id.parse::<u64>().ok().and_then(Id::new_checked),
    ) {
        let _ = account.http.delete_message(ch, m).await;
    }
    let text = match reply {
        Ok(r) if r.replayed => {
            tracing::info!(agent = %agent, message = %msg.message_id, "message answered before; not posted again");
            None
        }
        Ok(r) if r.silent || is_no_reply(&r.text) || r.text.trim().is_empty() => None,
        Ok(r) => Some(r.text),
        Err(strata_engine::agent::AgentError::Denied(why)) => {
            tracing::info!(agent = %agent, sender = %msg.sender_id, reason = %why, "Discord message not for this sender");
            None
        }
        // The budget's own sentence: what was reached and when it renews.
        Err(strata_engine::agent::AgentError::Budget(why)) => Some(why),
        Err(e) => {
            tracing::warn!(agent = %agent, error = %e, "turn failed");
            Some(format!("Sorry, I could not answer that ({e})."))
        }
    };
    let text = text.filter(|text| {
        let fresh = guards.lock().unwrap_or_else(|p| p.into_inner()).outgoing(
            std::time::Instant::now(),
            &msg.channel_id,
            text,
        );
        if !fresh {
            tracing::info!(agent = %agent, channel = %msg.channel_id, "same reply to this channel within 120 s dropped");
        }
        fresh
    });
    let Some(text) = text else {
        // Nothing to say after all: what streamed goes.
        if let Some(ch) = channel_ref {
            live::show(&account, ch, reply_to, &mut streamed, "").await;
        }
        return;
    };
    let (text, files) = files.outgoing(&text).await;
    // What streamed becomes the final text (edited, split as any reply); a reply with files
    // is posted afresh, the files with its first part.
    if let Some(ch) = channel_ref
        && !streamed.0.is_empty()
    {
        if files.is_empty() {
            live::show(&account, ch, reply_to, &mut streamed, &text).await;
            return;
        }
        live::show(&account, ch, reply_to, &mut streamed, "").await;
    }
    let out = OutboundMessage {
        channel_id: msg.channel_id.clone(),
        text,
        reply_to: Some(msg.message_id.clone()),
    };
    // A text reply goes under the turn's id: if this process dies before the turn's end is
    // written, the resumed turn posts it again under the same nonce and Discord makes no
    // second message.
    let posted = if files.is_empty() {
        account.send_keyed(out, &turn_id).await
    } else {
        account.send_with_files(out, files).await
    };
    if let Err(e) = posted {
        tracing::warn!(agent = %agent, error = %e, "posting the reply failed");
    }
}

/// Channel → category (parent) ids, looked up over REST once per channel.
#[derive(Default)]
pub(crate) struct Categories {
    pub(crate) known: std::collections::HashMap<u64, Option<String>>,
}

impl Categories {
    pub(crate) async fn lookup(
        &mut self,
        http: &twilight_http::Client,
        channel: u64,
    ) -> Option<String> {
        if let Some(c) = self.known.get(&channel) {
            return c.clone();
        }
        let id = Id::new_checked(channel)?;
        let parent = match http.channel(id).await {
            Ok(resp) => match resp.model().await {
                Ok(ch) => ch.parent_id.map(|p| p.to_string()),
                Err(e) => {
                    tracing::warn!(channel, error = %e, "reading a channel failed");
                    return None;
                }
            },
            Err(e) => {
                tracing::warn!(channel, error = %e, "looking up a channel failed");
                return None;
            }
        };
        if self.known.len() > 10_000 {
            self.known.clear();
        }
        self.known.insert(channel, parent.clone());
        parent
    }
}

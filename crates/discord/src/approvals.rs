//! Approvals by reaction: each request is posted to `security.hitl.channel` with the agent,
//! tool, redacted arguments and id; ✅ or ❌ from a listed approver decides it. Reactions from
//! bots, from ourselves and from non-approvers are ignored (and logged). The outcome is
//! posted as a reply to the request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use strata_engine::{Principal, async_trait};
use strata_runtime::approval::{ApprovalChannel, ApprovalRecord, ApprovalStatus, Approvals};
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_model::id::Id;
use twilight_model::id::marker::ChannelMarker;

use crate::DiscordAccount;

/// Approve.
pub const YES: &str = "✅";
/// Deny.
pub const NO: &str = "❌";

/// Posts requests to one channel and maps reactions on them back to decisions.
pub struct DiscordApprovals {
    account: Arc<DiscordAccount>,
    channel: Id<ChannelMarker>,
    approvals: Weak<Approvals>,
    /// Request message id → request id.
    posted: Mutex<HashMap<u64, (String, u64)>>,
}

impl DiscordApprovals {
    /// A channel for `approvals` in Discord channel `channel` of `account`.
    pub fn new(
        account: Arc<DiscordAccount>,
        channel: Id<ChannelMarker>,
        approvals: &Arc<Approvals>,
    ) -> Self {
        DiscordApprovals {
            account,
            channel,
            approvals: Arc::downgrade(approvals),
            posted: Mutex::new(HashMap::new()),
        }
    }

    /// Handles a reaction; returns true when it decided a request.
    /// `me` is the bot's own user id: a request posted by another instance (not in this
    /// one's memory) is read back from Discord and taken only when the bot wrote it.
    pub async fn on_reaction(
        &self,
        message_id: u64,
        user_id: u64,
        user_is_bot: bool,
        emoji: &str,
        me: Option<u64>,
    ) -> bool {
        let known = self
            .posted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&message_id)
            .cloned();
        let request = match known {
            Some((request, _)) => request,
            None => match self.posted_elsewhere(message_id, me).await {
                Some(r) => r,
                None => return false,
            },
        };
        let approve = match emoji {
            YES => true,
            NO => false,
            _ => return false,
        };
        if user_is_bot {
            tracing::info!(request = %request, user = user_id, "approval reaction from a bot ignored");
            return false;
        }
        let Some(approvals) = self.approvals.upgrade() else {
            return false;
        };
        let who = Principal::Person {
            id: format!("discord:{user_id}"),
        };
        match approvals.decide(&request, approve, &who, None).await {
            Ok(_) => true,
            Err(e) => {
                tracing::info!(request = %request, user = user_id, error = %e, "approval reaction not taken");
                false
            }
        }
    }

    /// The request id of a request message another instance posted in the channel: read
    /// back from Discord, taken only when this bot wrote it.
    async fn posted_elsewhere(&self, message_id: u64, me: Option<u64>) -> Option<String> {
        let me = me?;
        let id = Id::new_checked(message_id)?;
        let m = self
            .account
            .http
            .message(self.channel, id)
            .await
            .ok()?
            .model()
            .await
            .ok()?;
        if m.author.id.get() != me {
            return None;
        }
        request_id(&m.content)
    }
}

/// The id in a request message's first line (`**Approval needed** `<id>``).
fn request_id(text: &str) -> Option<String> {
    let rest = text.strip_prefix(HEADER)?;
    let id = rest.strip_prefix('`')?.split('`').next()?;
    (!id.is_empty() && id.len() <= 64 && !id.contains(char::is_whitespace)).then(|| id.to_owned())
}

/// How a request message starts.
const HEADER: &str = "**Approval needed** ";

fn status_word(s: &ApprovalStatus) -> String {
    format!("{s:?}").to_lowercase()
}

#[async_trait]
impl ApprovalChannel for DiscordApprovals {
    fn name(&self) -> &str {
        "discord"
    }

    async fn post(&self, r: &ApprovalRecord) {
        let args = serde_json::to_string_pretty(&r.args).unwrap_or_default();
        let args: String = args.chars().take(1200).collect();
        let text = format!(
            "{HEADER}`{}`\nAgent: {} · tool: `{}` · for: {}\n{}\n```json\n{}\n```\nReact {YES} to approve or {NO} to deny.",
            r.id,
            r.agent_id.as_deref().unwrap_or("—"),
            r.tool,
            r.principal,
            r.description,
            args
        );
        let resp = self
            .account
            .http
            .create_message(self.channel)
            .content(&text)
            .await;
        let msg = match resp {
            Ok(resp) => match resp.model().await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "approval request posted but not readable");
                    return;
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, request = %r.id, "posting the approval request failed");
                return;
            }
        };
        self.posted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(msg.id.get(), (r.id.clone(), msg.id.get()));
        for e in [YES, NO] {
            let emoji = RequestReactionType::Unicode { name: e };
            let _ = self
                .account
                .http
                .create_reaction(self.channel, msg.id, &emoji)
                .await;
        }
    }

    async fn outcome(&self, r: &ApprovalRecord) {
        let msg = self
            .posted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(_, (id, _))| *id == r.id)
            .map(|(m, _)| *m);
        let Some(msg) = msg.and_then(Id::new_checked) else {
            return;
        };
        let text = format!(
            "`{}` {} {}",
            r.id,
            status_word(&r.status),
            r.approver
                .as_deref()
                .map(|a| format!("by {a}"))
                .unwrap_or_default()
        );
        let _ = self
            .account
            .http
            .create_message(self.channel)
            .content(text.trim_end())
            .reply(msg)
            .fail_if_not_exists(false)
            .await;
    }
}

//! A reply shown as it is written: one message (more past 2,000 characters) posted once the
//! model has said something and edited at most once per [`EDIT_EVERY`] — well inside
//! Discord's five edits per five seconds per channel, and twilight's rate limiter queues
//! anything beyond — then set to the final text, split as any reply is.

use std::time::Duration;

use strata_engine::turns::TurnEvent;
use tokio::sync::mpsc;
use twilight_model::id::Id;
use twilight_model::id::marker::{ChannelMarker, MessageMarker};

use crate::split::split_message;
use crate::{DiscordAccount, MAX_MESSAGE};

/// How often the shown text is brought up to date.
pub(crate) const EDIT_EVERY: Duration = Duration::from_millis(1200);

/// Messages posted for a reply so far, in order, with what each shows.
#[derive(Default)]
pub(crate) struct Shown(pub(crate) Vec<(Id<MessageMarker>, String)>);

/// Follows the turn's events until the turn drops its sink; returns what was posted.
/// Text written before a tool call is replaced by the next round's: the message shows the
/// answer being written, not the model's asides.
pub(crate) async fn follow(
    account: std::sync::Arc<DiscordAccount>,
    channel: Id<ChannelMarker>,
    reply_to: Option<Id<MessageMarker>>,
    mut events: mpsc::UnboundedReceiver<TurnEvent>,
) -> Shown {
    let mut shown = Shown::default();
    let mut text = String::new();
    let mut dirty = false;
    let mut tick = tokio::time::interval(EDIT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Some(TurnEvent::Token { text: t }) => {
                    text.push_str(&t);
                    dirty = true;
                }
                Some(TurnEvent::ToolStart { .. }) => {
                    text.clear();
                    dirty = false;
                }
                Some(TurnEvent::ToolEnd { .. }) => {}
                None => break,
            },
            _ = tick.tick() => {
                if dirty && worth_showing(&text) {
                    show(&account, channel, reply_to, &mut shown, &text).await;
                    dirty = false;
                }
            }
        }
    }
    shown
}

/// Not blank, and neither the `NO_REPLY` sentinel nor what may still become it.
fn worth_showing(text: &str) -> bool {
    let t = text
        .trim()
        .trim_start_matches(|c: char| "*_`[({<\"'".contains(c));
    !t.is_empty() && !"NO_REPLY".starts_with(t) && !strata_engine::agent::is_no_reply(text)
}

/// Brings the posted messages in line with `text`: edits what changed, posts what is new
/// (the first as a reply to the person's message), deletes what is no longer needed.
pub(crate) async fn show(
    account: &DiscordAccount,
    channel: Id<ChannelMarker>,
    reply_to: Option<Id<MessageMarker>>,
    shown: &mut Shown,
    text: &str,
) {
    let parts = if text.trim().is_empty() {
        Vec::new()
    } else {
        split_message(text, MAX_MESSAGE)
    };
    for (i, part) in parts.iter().enumerate() {
        match shown.0.get_mut(i) {
            Some((id, was)) if was != part => {
                match account
                    .http
                    .update_message(channel, *id)
                    .content(Some(part))
                    .await
                {
                    Ok(_) => part.clone_into(was),
                    Err(e) => tracing::warn!(error = %e, "editing a streamed reply failed"),
                }
            }
            Some(_) => {}
            None => {
                let mut req = account.http.create_message(channel).content(part);
                if i == 0
                    && let Some(r) = reply_to
                {
                    req = req.reply(r).fail_if_not_exists(false);
                }
                match req.await {
                    Ok(resp) => match resp.model().await {
                        Ok(m) => shown.0.push((m.id, part.clone())),
                        Err(e) => tracing::warn!(error = %e, "a posted reply came back unread"),
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "posting a streamed reply failed");
                        return;
                    }
                }
            }
        }
    }
    while shown.0.len() > parts.len() {
        if let Some((id, _)) = shown.0.pop()
            && let Err(e) = account.http.delete_message(channel, id).await
        {
            tracing::warn!(error = %e, "deleting a streamed reply failed");
        }
    }
}

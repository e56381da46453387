//! A downstream team's crate: a connector, a memory backend, an agent and a tool, written
//! against the engine's contract only (tests/turn.rs checks the names this file uses).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use strata_engine::agent::{Agent, AgentError, Message, Reply, TurnContext};
use strata_engine::connector::{Connector, ConnectorError, InboundMessage, OutboundMessage};
use strata_engine::memory::{MemoryBackend, MemoryError, MemoryTurn};
use strata_engine::{ToolContext, ToolError, async_trait, tool};
use tokio::sync::{mpsc, watch};

/// Keeps this crate, and so its `#[tool]`s, linked into a binary that names nothing else of it.
#[inline(never)]
pub fn link() -> &'static str {
    "strata-downstream-example"
}

/// Messages in from `inbox/<channel>.msg` files (one message each, renamed to `.done` once
/// read), answers out to `outbox/<channel>.txt` (appended, one line per answer).
pub struct DirConnector {
    inbox: PathBuf,
    outbox: PathBuf,
}

impl DirConnector {
    /// A connector over `root/inbox` and `root/outbox` (created when missing).
    pub fn new(root: impl Into<PathBuf>) -> std::io::Result<Self> {
        let root = root.into();
        let (inbox, outbox) = (root.join("inbox"), root.join("outbox"));
        std::fs::create_dir_all(&inbox)?;
        std::fs::create_dir_all(&outbox)?;
        Ok(DirConnector { inbox, outbox })
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> ConnectorError {
        ConnectorError {
            connector: self.name().to_owned(),
            detail: format!("{what}: {e}"),
        }
    }

    /// The messages waiting in the inbox, each marked read.
    async fn take(&self) -> Result<Vec<InboundMessage>, ConnectorError> {
        let mut found = Vec::new();
        let mut dir = tokio::fs::read_dir(&self.inbox)
            .await
            .map_err(|e| self.failed("reading the inbox", e))?;
        while let Some(entry) = dir
            .next_entry()
            .await
            .map_err(|e| self.failed("reading the inbox", e))?
        {
            let path = entry.path();
            if path.extension().is_none_or(|x| x != "msg") {
                continue;
            }
            let channel = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = tokio::fs::read_to_string(&path)
                .await
                .map_err(|e| self.failed("reading a message", e))?;
            tokio::fs::rename(&path, path.with_extension("done"))
                .await
                .map_err(|e| self.failed("marking a message read", e))?;
            found.push(InboundMessage {
                connector: self.name().to_owned(),
                channel_id: channel.clone(),
                message_id: format!("{channel}-{}", found.len()),
                sender_id: channel,
                sender_is_bot: false,
                text: text.trim().to_owned(),
                guild_id: None,
                mentions_me: true,
            });
        }
        Ok(found)
    }
}

#[async_trait]
impl Connector for DirConnector {
    fn name(&self) -> &str {
        "dir"
    }

    async fn run(
        &self,
        inbound: mpsc::Sender<InboundMessage>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ConnectorError> {
        while !*stop.borrow() {
            for m in self.take().await? {
                if inbound.send(m).await.is_err() {
                    return Ok(());
                }
            }
            tokio::select! {
                _ = stop.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        Ok(())
    }

    async fn send(&self, message: OutboundMessage) -> Result<(), ConnectorError> {
        use tokio::io::AsyncWriteExt as _;
        let path = self.outbox.join(format!("{}.txt", message.channel_id));
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await
            .map_err(|e| self.failed("opening the outbox", e))?;
        f.write_all(format!("{}\n", message.text).as_bytes())
            .await
            .map_err(|e| self.failed("writing the outbox", e))
    }
}

/// Notes per agent and sender, in memory: what each exchange was about.
#[derive(Default)]
pub struct NotesMemory {
    notes: Mutex<Vec<(String, String, String)>>,
}

impl NotesMemory {
    fn notes_of(&self, agent: &str, sender: &str) -> Vec<String> {
        self.notes
            .lock()
            .map(|n| {
                n.iter()
                    .filter(|(a, s, _)| a == agent && s == sender)
                    .map(|(_, _, t)| t.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[async_trait]
impl MemoryBackend for NotesMemory {
    async fn context_block(
        &self,
        turn: &MemoryTurn<'_>,
        _message: &str,
    ) -> Result<Option<String>, MemoryError> {
        let notes = self.notes_of(turn.agent_id, &turn.sender.to_string());
        Ok((!notes.is_empty()).then(|| notes.join("; ")))
    }

    async fn record_exchange(
        &self,
        turn: &MemoryTurn<'_>,
        user: &str,
        _assistant: &str,
    ) -> Result<(), MemoryError> {
        if user.trim().is_empty() {
            return Err(MemoryError::Invalid("nothing to remember".into()));
        }
        self.notes
            .lock()
            .map_err(|_| MemoryError::Failed("the notes are poisoned".into()))?
            .push((
                turn.agent_id.to_owned(),
                turn.sender.to_string(),
                format!("asked about {user:?}"),
            ));
        Ok(())
    }
}

/// Answers with the message's word count and what it remembers of the sender.
pub struct Librarian;

#[async_trait]
impl Agent for Librarian {
    fn id(&self) -> &str {
        "librarian"
    }

    async fn handle(&self, turn: TurnContext, input: Message) -> Result<Reply, AgentError> {
        let words = input.text.split_whitespace().count();
        let memory = turn.env.memory.clone();
        let mt = MemoryTurn {
            agent_id: &turn.agent_id,
            session_id: &turn.session_id,
            channel_id: &turn.channel_id,
            sender: &turn.sender,
            taint: None,
        };
        let mut text = format!("{words} words");
        if let Some(m) = &memory {
            if let Ok(Some(before)) = m.context_block(&mt, &input.text).await {
                text.push_str(&format!("; before, you {before}"));
            }
            // Memory is best effort: a failure to remember does not fail the answer.
            let _ = m.record_exchange(&mt, &input.text, &text).await;
        }
        Ok(Reply::text(text))
    }
}

/// What `word_count` returns.
#[derive(Debug, serde::Serialize)]
pub struct Count {
    /// Words, split at white space.
    pub words: usize,
}

/// Counts the words of a text.
#[tool(capabilities = [read], side_effects = none)]
async fn word_count(
    _ctx: &ToolContext,
    /// The text to count.
    text: String,
) -> Result<Count, ToolError> {
    Ok(Count {
        words: text.split_whitespace().count(),
    })
}

//! The last warnings and errors this process logged, kept for `strata status` and
//! `GET /api/status`: a `tracing` layer beside the log's own, holding the newest
//! [`KEPT`] lines.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;

/// How many lines are kept.
pub const KEPT: usize = 20;

/// The lines, newest last.
#[derive(Default)]
pub struct Recent {
    lines: Mutex<VecDeque<Value>>,
}

static RECENT: OnceLock<Arc<Recent>> = OnceLock::new();

/// This process's lines (empty until logging starts).
pub fn recent() -> Arc<Recent> {
    RECENT.get_or_init(Arc::default).clone()
}

impl Recent {
    /// The lines kept, oldest first: `{ts, level, target, message}`.
    pub fn lines(&self) -> Vec<Value> {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    fn push(&self, line: Value) {
        let mut l = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if l.len() == KEPT {
            l.pop_front();
        }
        l.push_back(line);
    }
}

/// The layer that fills [`recent()`].
pub struct Layer(Arc<Recent>);

/// A layer over this process's [`Recent`].
pub fn layer() -> Layer {
    Layer(recent())
}

#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

impl<S: Subscriber> tracing_subscriber::Layer<S> for Layer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let level = *event.metadata().level();
        if !matches!(level, Level::WARN | Level::ERROR) {
            return;
        }
        let mut text = Text::default();
        event.record(&mut text);
        self.0.push(json!({
            "ts": strata_engine::clock::now_rfc3339(),
            "level": level.as_str().to_ascii_lowercase(),
            "target": event.metadata().target(),
            "message": format!("{}{}", text.message, text.fields),
        }));
    }
}

//! `journal.*`: the turn journal that lets a turn survive a crash (docs/DURABILITY.md).

use serde::{Deserialize, Serialize};

/// `journal.*`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct JournalConfig {
    /// Journal every turn (default on). Off, a turn that dies half-way is lost and a retry
    /// runs it again from the start.
    pub enabled: bool,
    /// Finished turns' journals are deleted after this many days (default 30; 0 = keep).
    pub retain_days: u32,
    /// A tool call that had started when the process died, whose tool neither is free of
    /// side effects nor honours an idempotency key: `ask` (default) asks a person whether
    /// to run it again; `skip` never runs it again. Either way the model is told its outcome
    /// is unknown when it is not run.
    pub unknown_outcome: UnknownOutcome,
    /// Largest recorded value (a tool's result, a model's answer) in bytes; longer ones are
    /// cut, and a turn resumed over a cut value runs that step again where that is safe.
    pub max_step_bytes: usize,
    /// Wait for the journal's commit before a tool without side effects runs too (default
    /// on): a crash after any tool ran then never asks the model again for the answer that
    /// asked for it. Off, a turn waits for a commit only before a tool with side effects —
    /// less time per turn (docs/DURABILITY.md), and a crash during a read may make a model
    /// call a second time (nothing with effects ever runs twice either way).
    pub commit_before_reads: bool,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            enabled: true,
            retain_days: 30,
            unknown_outcome: UnknownOutcome::Ask,
            max_step_bytes: 1 << 20,
            commit_before_reads: true,
        }
    }
}

/// What a resumed turn does with a call whose outcome is unknown (`journal.unknown_outcome`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum UnknownOutcome {
    /// A person may approve running it again (through the approval queue).
    #[default]
    Ask,
    /// Never run it again.
    Skip,
}

//! # strata-tools
//!
//! Generic tools every deployment gets. Each is a `#[tool]` function; binaries call [`link`]
//! so the linker keeps this crate (and with it the tools' `inventory` registrations).

pub mod agents;
pub mod channels;
pub mod compress;
pub mod extend;
pub mod files;
pub mod goals;
mod html;
pub mod memory;
pub mod notes;
pub mod runtime;
pub mod schedules;
pub mod search;
pub mod shell;
pub mod skill_tools;
pub mod team;
mod time;
pub mod web;

pub use files::{FileEntry, ListFilesOutput, ReadFileOutput};

strata_engine::declare_core!();

/// Keeps this crate linked into the binary. Call it once from `main` (the launcher does).
/// Returns the names of the tools this crate provides, for start-up checks and tests.
#[inline(never)]
pub fn link() -> &'static [&'static str] {
    &[
        "ask_agent",
        "compress_context",
        "create_skill",
        "current_time",
        "decompress_context",
        "events",
        "goal_block",
        "goal_create",
        "goal_decide",
        "goal_join",
        "goal_propose",
        "goal_resume",
        "goal_set",
        "goal_status",
        "goal_task",
        "goal_vote",
        "http_request",
        "install_mcp",
        "list_capabilities",
        "list_files",
        "memory_forget",
        "memory_list",
        "memory_search",
        "memory_semantic_search",
        "memory_store",
        "read_channel_history",
        "read_file",
        "read_message",
        "read_url",
        "schedule_cancel",
        "schedule_create",
        "schedule_list",
        "search_channel_history",
        "search_notes",
        "send_discord_file",
        "send_message",
        "send_to_agent",
        "state",
        "team_add",
        "team_get",
        "team_list",
        "team_remove",
        "team_update",
        "terminal_exec",
        "web_search",
        "write_file",
    ]
}

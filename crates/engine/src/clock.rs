//! Wall-clock time as the engine writes it (audit records, the `[CONTEXT]` block, tools).

/// Now as RFC 3339 UTC with milliseconds (`2026-01-02T03:04:05.678Z`).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

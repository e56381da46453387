//! `mcp` (from `config/mcp.yaml`): external MCP servers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `mcp` (from `config/mcp.yaml`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// External MCP servers by name.
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// One external MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// How to reach it.
    pub transport: McpTransport,
    /// Program (stdio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Arguments (stdio).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment for the child (stdio); values may be `vault:` refs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Endpoint (http).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers (http); values may be `vault:` refs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Whether what its tools return is trusted content (`trusted`) or not (`untrusted`,
    /// the default: their results taint the turn that reads them).
    #[serde(default, skip_serializing_if = "McpTrust::is_untrusted")]
    pub trust: McpTrust,
    /// Its read-only tools' results are trusted even though the server's are not (default
    /// false). A read that sends a URL or free text out is still checked for where that
    /// came from.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trust_reads: bool,
    /// Per tool, by its name on the server: what to believe of it over the server's
    /// settings and the tool's own annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, McpToolConfig>,
}

/// Whether an MCP server's (or tool's) results are trusted content.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum McpTrust {
    /// Untrusted content: it taints the turn (the default).
    #[default]
    Untrusted,
    /// Trusted content: it does not taint, and values found in it are not steered.
    Trusted,
}

impl McpTrust {
    fn is_untrusted(&self) -> bool {
        *self == McpTrust::Untrusted
    }
}

/// `mcp.servers.<name>.tools.<tool>`: settings of one tool over its annotations.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpToolConfig {
    /// Its results' trust (default: the server's, or `trusted` for a read-only tool of a
    /// server with `trust_reads`).
    pub trust: Option<McpTrust>,
    /// It changes nothing (default: its `readOnlyHint` annotation, else false).
    pub read_only: Option<bool>,
    /// How far its effects reach (default: `none` for a read-only tool, else `external`).
    pub side_effects: Option<crate::spec::SideEffects>,
    /// The fields of its structured result (`structuredContent`) that the system behind it
    /// writes and vouches for, by name at any depth, when its results are otherwise
    /// untrusted: a bank's `sender`, `recipient` and `amount` beside the `subject` whoever
    /// sent the money wrote. Values found only in these are not steered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trusted_fields: Vec<String>,
    /// Running it again with the same arguments and the same idempotency key has no new
    /// effect: the server honours the key Strata sends in the request's `_meta`
    /// ([`IDEMPOTENCY_META_KEY`]), or the tool is idempotent by nature. Then a turn resumed
    /// after a crash may run a call of it that had started again (default: its
    /// `idempotentHint` annotation, else false).
    pub idempotent: Option<bool>,
}

/// The `_meta` key under which a tool call of a journaled turn carries its idempotency key
/// to an MCP server (docs/DURABILITY.md).
pub const IDEMPOTENCY_META_KEY: &str = "strata/idempotency-key";

/// What the server's own annotations say of a tool (MCP `ToolAnnotations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct McpHints {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `openWorldHint`.
    pub open_world: Option<bool>,
    /// `idempotentHint`.
    pub idempotent: Option<bool>,
}

/// How Strata registers an external MCP tool: what it reaches and whether its results are
/// trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpToolTrust {
    /// Its side effects.
    pub side_effects: crate::spec::SideEffects,
    /// Its results are untrusted content (the tool is web-facing: it taints).
    pub untrusted: bool,
    /// It reaches the network with its arguments (`openWorldHint` not false).
    pub network: bool,
    /// A call of it may run again after a crash (`tools.<tool>.idempotent`, else its
    /// `idempotentHint`).
    pub idempotent: bool,
}

impl McpServerConfig {
    /// The fields of tool `tool`'s results that are trusted although its results are not
    /// (`tools.<tool>.trusted_fields`; none by default).
    pub fn trusted_fields(&self, tool: &str) -> Vec<String> {
        self.tools
            .get(tool)
            .map(|t| t.trusted_fields.clone())
            .unwrap_or_default()
    }
}

impl McpServerConfig {
    /// What to believe of the server's tool `tool`, from the settings here and the tool's
    /// annotations: the settings win; without either, the tool has external side effects,
    /// reaches the network and returns untrusted content.
    pub fn tool_trust(&self, tool: &str, hints: McpHints) -> McpToolTrust {
        use crate::spec::SideEffects;
        let over = self.tools.get(tool).cloned().unwrap_or_default();
        let read_only = over.read_only.or(hints.read_only).unwrap_or(false);
        let side_effects = over.side_effects.unwrap_or(if read_only {
            SideEffects::None
        } else {
            SideEffects::External
        });
        let trust = over.trust.unwrap_or(if read_only && self.trust_reads {
            McpTrust::Trusted
        } else {
            self.trust
        });
        McpToolTrust {
            side_effects,
            untrusted: trust == McpTrust::Untrusted,
            network: hints.open_world != Some(false),
            idempotent: over.idempotent.or(hints.idempotent).unwrap_or(false),
        }
    }
}

/// MCP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio,
    /// Streamable HTTP.
    Http,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SideEffects;

    #[test]
    fn settings_win_over_annotations_and_unknown_tools_are_distrusted() {
        let mut cfg: McpServerConfig =
            yaml_serde::from_str("transport: http\nurl: http://127.0.0.1:9/mcp\n").expect("cfg");
        let none = McpHints::default();
        let reads = McpHints {
            read_only: Some(true),
            open_world: Some(false),
            idempotent: None,
        };
        let t = cfg.tool_trust("x", none);
        assert_eq!(
            (t.side_effects, t.untrusted, t.network),
            (SideEffects::External, true, true)
        );
        let t = cfg.tool_trust("x", reads);
        assert_eq!(
            (t.side_effects, t.untrusted, t.network),
            (SideEffects::None, true, false)
        );
        cfg.trust_reads = true;
        assert!(!cfg.tool_trust("x", reads).untrusted);
        assert!(cfg.tool_trust("x", none).untrusted);
        cfg.tools.insert(
            "x".into(),
            McpToolConfig {
                trust: Some(McpTrust::Untrusted),
                read_only: Some(false),
                side_effects: Some(SideEffects::Local),
                trusted_fields: vec![],
                idempotent: None,
            },
        );
        let t = cfg.tool_trust("x", reads);
        assert_eq!((t.side_effects, t.untrusted), (SideEffects::Local, true));
        // Idempotent when the server says so, unless the operator says otherwise.
        let said = McpHints {
            idempotent: Some(true),
            ..McpHints::default()
        };
        assert!(!cfg.tool_trust("x", none).idempotent);
        assert!(cfg.tool_trust("y", said).idempotent);
        cfg.tools.get_mut("x").expect("x").idempotent = Some(false);
        assert!(!cfg.tool_trust("x", said).idempotent);
        // The file's words.
        let cfg: McpServerConfig = yaml_serde::from_str(
            "transport: stdio\ncommand: bank\ntrust: trusted\ntools:\n  send_money: {trust: untrusted, side_effects: external}\n",
        )
        .expect("cfg");
        assert_eq!(cfg.trust, McpTrust::Trusted);
        assert_eq!(
            cfg.tools["send_money"].side_effects,
            Some(SideEffects::External)
        );
        assert!(
            yaml_serde::from_str::<McpServerConfig>("transport: stdio\ntrust: maybe\n").is_err()
        );
    }
}

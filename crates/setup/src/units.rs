//! systemd units for a deployment, rendered with its real paths.
//!
//! The main instance is locked down: read-only system, writes only under the overlay's
//! `data/`, `tmp/`, `agents/` and `config/`, no new privileges, no capabilities, private
//! devices and /tmp, no namespaces (so `terminal_exec` uses Landlock there, not bubblewrap),
//! a system-call allow-list (`@system-service` plus the Landlock calls the sandbox makes).
//! The optional ops instance (`--profile ops`) runs without that sandbox: it is the one meant
//! to restart services and read the host. Both share the data directory (SQLite in WAL mode)
//! and the vault; the launcher's per-profile lock file keeps each from starting twice.

use std::path::{Path, PathBuf};

/// What the units need to know.
#[derive(Debug, Clone)]
pub struct UnitSpec {
    /// Deployment name (`strata-<name>.service`).
    pub name: String,
    /// The overlay directory (absolute).
    pub overlay: PathBuf,
    /// The deployment binary (absolute).
    pub binary: PathBuf,
    /// Service user and group.
    pub user: String,
    /// Service group.
    pub group: String,
    /// The vault key file, when there is one.
    pub key_file: Option<PathBuf>,
    /// Whether to render the ops instance.
    pub ops: bool,
}

/// The file names and texts: `strata-<name>.service` and, with ops,
/// `strata-<name>-ops.service`.
pub fn render(spec: &UnitSpec) -> Vec<(String, String)> {
    let mut out = vec![(format!("strata-{}.service", spec.name), main_unit(spec))];
    if spec.ops {
        out.push((format!("strata-{}-ops.service", spec.name), ops_unit(spec)));
    }
    out
}

/// systemd quotes: a path with spaces is written in double quotes.
fn q(p: &Path) -> String {
    let s = p.display().to_string();
    if s.contains([' ', '"', '\\']) {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        s
    }
}

fn common_service(spec: &UnitSpec, profile: Option<&str>) -> String {
    let mut s = String::new();
    s.push_str("[Service]\nType=simple\n");
    s.push_str(&format!("User={}\nGroup={}\n", spec.user, spec.group));
    s.push_str(&format!("WorkingDirectory={}\n", q(&spec.overlay)));
    let profile_arg = profile
        .map(|p| format!(" --profile {p}"))
        .unwrap_or_default();
    s.push_str(&format!(
        "ExecStart={} --overlay {}{profile_arg} serve\n",
        q(&spec.binary),
        q(&spec.overlay)
    ));
    if let Some(k) = &spec.key_file {
        s.push_str(&format!("Environment=STRATA_VAULT_KEY_FILE={}\n", q(k)));
    }
    s.push_str("Environment=STRATA_LOG__FORMAT=json\n");
    s.push_str("Restart=on-failure\nRestartSec=5\nTimeoutStopSec=30\nUMask=0077\n");
    s
}

fn main_unit(spec: &UnitSpec) -> String {
    let o = &spec.overlay;
    let mut s = format!(
        "# Rendered by `cargo xtask setup` for deployment `{name}`; re-run setup to update.\n\
         [Unit]\n\
         Description=Strata {name} (main instance)\n\
         After=network-online.target\n\
         Wants=network-online.target\n\n",
        name = spec.name,
    );
    s.push_str(&common_service(spec, None));
    s.push_str(&format!(
        "\n# Sandboxing: the system is read-only but for the overlay's working directories.\n\
         ProtectSystem=strict\n\
         ProtectHome=read-only\n\
         ReadWritePaths={} {} {} {}\n\
         PrivateTmp=yes\n\
         PrivateDevices=yes\n\
         NoNewPrivileges=yes\n\
         CapabilityBoundingSet=\n\
         AmbientCapabilities=\n\
         RestrictNamespaces=yes\n\
         RestrictSUIDSGID=yes\n\
         RestrictRealtime=yes\n\
         RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n\
         LockPersonality=yes\n\
         ProtectKernelTunables=yes\n\
         ProtectKernelModules=yes\n\
         ProtectKernelLogs=yes\n\
         ProtectControlGroups=yes\n\
         ProtectClock=yes\n\
         ProtectHostname=yes\n\
         SystemCallArchitectures=native\n\
         SystemCallFilter=@system-service landlock_create_ruleset landlock_add_rule landlock_restrict_self\n\
         SystemCallFilter=~@privileged @mount @swap @reboot @raw-io @module @debug @cpu-emulation @obsolete\n\
         SystemCallErrorNumber=EPERM\n",
        q(&o.join("data")),
        q(&o.join("tmp")),
        q(&o.join("agents")),
        q(&o.join("config")),
    ));
    s.push_str("\n[Install]\nWantedBy=multi-user.target\n");
    s
}

fn ops_unit(spec: &UnitSpec) -> String {
    let mut s = format!(
        "# Rendered by `cargo xtask setup` for deployment `{name}`; re-run setup to update.\n\
         # The ops instance: profile `ops` (config/config.ops.yaml, config/agents.ops.yaml), not\n\
         # sandboxed by systemd, so its tools can inspect and restart services on this host.\n\
         [Unit]\n\
         Description=Strata {name} (ops instance)\n\
         After=network-online.target strata-{name}.service\n\
         Wants=network-online.target\n\n",
        name = spec.name,
    );
    s.push_str(&common_service(spec, Some("ops")));
    s.push_str("\n[Install]\nWantedBy=multi-user.target\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ops: bool) -> UnitSpec {
        UnitSpec {
            name: "acme".into(),
            overlay: "/srv/strata/acme".into(),
            binary: "/srv/strata/acme/target/release/strata-acme".into(),
            user: "strata".into(),
            group: "strata".into(),
            key_file: Some("/etc/strata/acme.vault-key".into()),
            ops,
        }
    }

    #[test]
    fn main_unit_snapshot() {
        let units = render(&spec(false));
        assert_eq!(units.len(), 1);
        assert_eq!(units[0].0, "strata-acme.service");
        insta::assert_snapshot!("main_unit", units[0].1);
    }

    #[test]
    fn ops_unit_snapshot() {
        let units = render(&spec(true));
        assert_eq!(units.len(), 2);
        assert_eq!(units[1].0, "strata-acme-ops.service");
        insta::assert_snapshot!("ops_unit", units[1].1);
    }

    #[test]
    fn paths_with_spaces_are_quoted_and_the_sandbox_keys_are_there() {
        let mut s = spec(false);
        s.overlay = "/srv/my deploy".into();
        let text = main_unit(&s);
        assert!(
            text.contains("WorkingDirectory=\"/srv/my deploy\""),
            "{text}"
        );
        assert!(
            text.contains("ReadWritePaths=\"/srv/my deploy/data\" \"/srv/my deploy/tmp\""),
            "{text}"
        );
        for key in [
            "ProtectSystem=strict",
            "NoNewPrivileges=yes",
            "CapabilityBoundingSet=\n",
            "PrivateDevices=yes",
            "RestrictNamespaces=yes",
            "SystemCallFilter=@system-service",
        ] {
            assert!(text.contains(key), "missing {key}");
        }
        // The ops instance is the unsandboxed one and runs the ops profile.
        let ops = ops_unit(&spec(true));
        assert!(ops.contains("--profile ops serve"));
        assert!(!ops.contains("ProtectSystem"));
    }
}

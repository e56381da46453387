//! Tidy tests: the invariants the architecture rests on, checked over the workspace's source
//! (`docs/ARCHITECTURE.md` names the test that guards each).
//!
//! - Only the Invoker calls `Tool::call`: every tool call passes the pipeline.
//! - Surface crates (`strata-http`, `strata-discord`, `strata-launcher`) decide no tool
//!   permission themselves: no access-policy decisions, no hand-written `prefix*` matching —
//!   they put a [`strata_engine::Scope`] on the `Invocation` and map the Invoker's answer.
//! - `name`/`prefix*` is read in one place (`scope.rs`).
//! - No `vault:` reference is resolved without the vault (`resolve_ref(…, None, …)`).
//! - `unsafe` is allowed in one file (the sandbox's pre-exec hook).
//! - Every child process of a running Strata starts through `strata-sandbox`.
//! - The MCP SDK (rmcp) is used in `strata-http` only.
//! - The engine is a ladder: each module names only modules on its own rung or below
//!   (`LADDER`), and no two modules name each other.
//! - The engine depends on no HTTP server or client, database or chat client, even
//!   transitively; `strata-net` does not depend on the engine.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Every `.rs` file under the `src/` of a workspace crate, with its path relative to the
/// workspace root. Test code (`tests/`, `#[cfg(test)]` modules at the end of a file) is left
/// out: tests may call tools directly.
fn sources() -> Vec<(String, String)> {
    let root = workspace();
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = ["crates", "modules"]
        .iter()
        .flat_map(|d| {
            std::fs::read_dir(root.join(d))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.path().join("src"))
        .chain([root.join("overlay-example/src"), root.join("benches/src")])
        .collect();
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).expect("read source");
                let code = match text.find("#[cfg(test)]") {
                    Some(i) => text[..i].to_owned(),
                    None => text,
                };
                let rel = p
                    .strip_prefix(&root)
                    .expect("inside")
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, code));
            }
        }
    }
    out.sort();
    assert!(
        out.len() > 50,
        "found only {} source files: is the workspace layout still crates/*/src?",
        out.len()
    );
    out
}

/// (file, line number, line) of every line matching `re` outside `allowed` files.
fn offenders(re: &str, allowed: &[&str], only_in: &[&str]) -> Vec<String> {
    let re = regex::Regex::new(re).expect("regex");
    let mut found = Vec::new();
    for (file, code) in sources() {
        if allowed.iter().any(|a| file == *a) {
            continue;
        }
        if !only_in.is_empty() && !only_in.iter().any(|p| file.starts_with(p)) {
            continue;
        }
        for (i, line) in code.lines().enumerate() {
            let t = line.trim_start();
            if t.starts_with("//") {
                continue;
            }
            if re.is_match(line) {
                found.push(format!("{file}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn only_the_invoker_calls_a_tool() {
    // `x.call(&ctx, …)`, `tool.call(…)`, `Tool::call(…)`.
    let found = offenders(
        r"(\b(tool|t)\.call\(|\.call\(\s*&?\s*\w*ctx\b|Tool::call\()",
        &["crates/engine/src/invoker.rs"],
        &[],
    );
    assert!(
        found.is_empty(),
        "Tool::call outside the Invoker (every call must pass the pipeline):\n{}",
        found.join("\n")
    );
}

#[test]
fn surfaces_decide_no_tool_permission_themselves() {
    let surfaces = ["crates/http/", "crates/discord/", "crates/launcher/"];
    let found = offenders(
        r"(\bpolicy(\(\))?\.decide\(|matches_any\(|\.ceiling\(|Tier::Person\b|policy(\(\))?\.tier\()",
        &[],
        &surfaces,
    );
    assert!(
        found.is_empty(),
        "a surface decides a tool permission itself; carry a Scope on the Invocation and \
         let the Invoker refuse (and audit) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn tool_patterns_are_read_in_one_place() {
    let found = offenders(
        r#"strip_suffix\(\s*['"]\*['"]\s*\)"#,
        &["crates/engine/src/scope.rs"],
        &[],
    );
    assert!(
        found.is_empty(),
        "`prefix*` matched by hand; use strata_engine::ToolPattern:\n{}",
        found.join("\n")
    );
}

#[test]
fn unsafe_is_allowed_in_one_file() {
    let found = offenders(
        r"allow\(\s*unsafe_code\s*\)",
        &["crates/sandbox/src/child.rs"],
        &[],
    );
    assert!(
        found.is_empty(),
        "unsafe code is allowed only in the sandbox's fork/exec hook:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_child_process_starts_through_the_sandbox_crate() {
    // Children started for models, people or config — tools, skills, providers, MCP
    // servers, external agents — get the sandbox (`strata_sandbox::run`) or its host
    // confinement (`strata_sandbox::host::command`): cleared environment, own process group,
    // killed at the deadline; a browser is started by us, never by chromiumoxide's `launch`.
    // The wizard, benchmarks and test support run tools of the
    // developer's own machine and are left out.
    let found = offenders(
        r"Command::new\(|Browser::launch\(",
        &[],
        &[
            "crates/engine/",
            "crates/browser/",
            "crates/tools/",
            "crates/llm/",
            "crates/http/",
            "crates/launcher/",
            "crates/discord/",
            "crates/memory/",
            "crates/store/",
            "crates/vault/",
            "crates/net/",
            "modules/",
            "overlay-example/",
        ],
    );
    assert!(
        found.is_empty(),
        "a child process started by hand; use strata_sandbox::run or strata_sandbox::host:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_mcp_sdk_is_used_in_one_crate() {
    let found = offenders(r"\brmcp::", &[], &[]);
    let outside: Vec<&String> = found
        .iter()
        .filter(|l| !l.starts_with("crates/http/"))
        .collect();
    assert!(
        outside.is_empty(),
        "rmcp outside strata-http (the MCP server and client live there):\n{outside:?}"
    );
}

#[test]
fn no_secret_reference_is_resolved_without_the_vault() {
    let found = offenders(r"resolve_ref\([^)]*,\s*None\s*,", &[], &[]);
    assert!(
        found.is_empty(),
        "a `vault:` reference resolved with no vault (use Env::secret):\n{}",
        found.join("\n")
    );
}

/// The normal (non-dev) dependency tree of `package`, one `name vX.Y.Z` per line.
fn tree(package: &str) -> String {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree", "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}",
        ])
        .current_dir(workspace())
        .output()
        .expect("cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_ssrf_guard_stands_on_its_own() {
    let t = tree("strata-net");
    assert!(
        !t.lines().any(|l| l.starts_with("strata-engine ")),
        "strata-net depends on the engine again; it takes its own NetPolicy:\n{t}"
    );
}

#[test]
fn the_engine_has_no_server_database_or_chat_dependency() {
    let tree = tree("strata-engine");
    let banned = ["axum", "hyper", "reqwest", "rusqlite", "twilight", "rmcp"];
    let found: Vec<&str> = tree
        .lines()
        .filter(|l| {
            let name = l.split_whitespace().next().unwrap_or_default();
            banned
                .iter()
                .any(|b| name == *b || name.starts_with(&format!("{b}-")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "strata-engine depends on {found:?}: servers, clients and databases live in the \
         crates that implement the engine's traits"
    );
    assert!(
        tree.contains("serde"),
        "cargo tree printed the tree: {tree}"
    );
}

/// The engine's rungs, bottom first. A module may name (`crate::x`) modules on its own rung or
/// below. A new module must be placed here.
const LADDER: &[(&str, &[&str])] = &[
    ("instruments", &["meters"]),
    (
        "plain data",
        &[
            "clock",
            "compress",
            "paths",
            "principal",
            "secret",
            "spec",
            "schema",
        ],
    ),
    (
        "config and pure decisions",
        &["config", "scope", "access", "safety", "taint"],
    ),
    (
        "traits and their data",
        &[
            "llm",
            "message",
            "memory",
            "session",
            "connector",
            "turns",
            "audit",
            "schedule",
            "usage",
            "goal",
            "goals",
        ],
    ),
    ("the environment a tool sees", &["tool"]),
    (
        "machinery",
        &[
            "scheduler",
            "agent",
            "monitor",
            "ratelimit",
            "approval",
            "budget",
            "store",
            "skills",
            "registry",
            "invoker",
            "context_window",
            "agent_loop",
            "manager",
            "runtime",
            "lib",
        ],
    ),
];

/// For each engine module (file, or `config/` as one), the modules it names.
fn engine_imports() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let re = regex::Regex::new(r"crate::([a-z_][a-z0-9_]*|[A-Z]\w*)").expect("regex");
    // Root re-exports named by type, mapped to their module.
    let by_type = [
        ("Registry", "registry"),
        ("RegisteredTool", "registry"),
        ("Invoker", "invoker"),
        ("Invocation", "invoker"),
        ("Principal", "principal"),
        ("Scope", "scope"),
        ("ToolFilter", "scope"),
        ("ToolPattern", "scope"),
    ];
    let mut out = std::collections::BTreeMap::new();
    for (file, code) in sources() {
        let Some(rel) = file.strip_prefix("crates/engine/src/") else {
            continue;
        };
        let module = match rel.split_once('/') {
            Some((dir, _)) => dir.to_owned(),
            None => rel.trim_end_matches(".rs").to_owned(),
        };
        let entry: &mut std::collections::BTreeSet<String> = out.entry(module.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for c in re.captures_iter(line) {
                let name = &c[1];
                let target = by_type
                    .iter()
                    .find(|(t, _)| *t == name)
                    .map_or(name, |(_, m)| m);
                // Types re-exported at the root that are not listed above come from `tool`
                // or `spec` (the `pub use tool::{…}` list); treat them as `tool`.
                let target = if target.starts_with(|c: char| c.is_ascii_uppercase()) {
                    "tool"
                } else {
                    target
                };
                if target != module && target != "__private" {
                    entry.insert(target.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn the_engine_is_a_ladder() {
    let rung = |m: &str| LADDER.iter().position(|(_, ms)| ms.contains(&m));
    let imports = engine_imports();
    let mut wrong = Vec::new();
    for (module, names) in &imports {
        let Some(mine) = rung(module) else {
            wrong.push(format!("`{module}` is on no rung: place it in LADDER"));
            continue;
        };
        for n in names {
            match rung(n) {
                Some(theirs) if theirs > mine => wrong.push(format!(
                    "`{module}` ({}) names `{n}` ({}), a higher rung",
                    LADDER[mine].0, LADDER[theirs].0
                )),
                None if imports.contains_key(n) => {
                    wrong.push(format!("`{n}` is on no rung: place it in LADDER"))
                }
                _ => {}
            }
            if imports.get(n).is_some_and(|back| back.contains(module)) && module < n {
                wrong.push(format!("`{module}` and `{n}` name each other"));
            }
        }
    }
    assert!(
        imports.len() > 20,
        "found only {} engine modules",
        imports.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every metric the engine exports is documented in docs/OPERATIONS.md, with its labels.
#[test]
fn every_metric_is_documented() {
    let doc = std::fs::read_to_string(workspace().join("docs/OPERATIONS.md")).expect("docs");
    for m in strata_engine::meters::CATALOGUE {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", m.name)))
            .unwrap_or_else(|| panic!("{} is not in docs/OPERATIONS.md's metrics table", m.name));
        for l in m.labels {
            assert!(row.contains(l), "{}: label {l} not documented", m.name);
        }
    }
}

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
//!   (`LADDER`), and no two modules name each other;
//!   docs/ARCHITECTURE.md's ladder table shows the same rungs. The launcher is one too, file by
//!   file (`LAUNCHER_LADDER`).
//! - The engine depends on no HTTP server or client, database or chat client, even
//!   transitively; `strata-net` does not depend on the engine.
//! - Every external crate is declared once, in the root `Cargo.toml`'s
//!   `[workspace.dependencies]`; members name it `x.workspace = true`.
//! - No `#[allow(unused_imports)]`: a file imports what it uses, by name.

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
        &["crates/runtime/src/invoker.rs"],
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
fn no_import_is_allowed_to_go_unused() {
    // A glob import under `allow(unused_imports)` hides what a file uses; name the imports.
    let found = offenders(r"allow\([^)]*\bunused_imports\b", &[], &[]);
    assert!(
        found.is_empty(),
        "imports kept though unused; import what the file uses, by name:\n{}",
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
            "provenance",
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
        ],
    ),
    ("the environment a tool sees", &["tool"]),
    ("what a team implements", &["agent", "lib"]),
];

/// The runtime's rungs (`crates/runtime/src`), bottom first, as [`LADDER`] for the engine.
const RUNTIME_LADDER: &[(&str, &[&str])] = &[
    (
        "data and seams",
        &[
            "context_window",
            "hub",
            "intent",
            "journal",
            "monitor",
            "ratelimit",
            "registry",
            "skills",
            "turns",
            "usage",
        ],
    ),
    ("services", &["goal", "schedule"]),
    (
        "the pipeline",
        &["approval", "budget", "invoker", "store", "env"],
    ),
    ("the agent loop", &["agent_loop", "manager", "lib"]),
];

/// For each module of the crate in `src` (`crates/engine/src/`: a file, or `config/` as
/// one), the modules it names.
fn crate_imports(
    src: &str,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let re = regex::Regex::new(r"crate::([a-z_][a-z0-9_]*|[A-Z]\w*)").expect("regex");
    // Root re-exports named by type, mapped to their module.
    let by_type = [
        ("Registry", "registry"),
        ("RegisteredTool", "registry"),
        ("Invoker", "invoker"),
        ("Invocation", "invoker"),
        ("EnvExt", "env"),
        ("Principal", "principal"),
        ("Scope", "scope"),
        ("ToolFilter", "scope"),
        ("ToolPattern", "scope"),
    ];
    let mut out = std::collections::BTreeMap::new();
    for (file, code) in sources() {
        let Some(rel) = file.strip_prefix(src) else {
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

/// What is wrong with `imports` (each module and the modules it names) against `ladder`, the
/// const named `name`: a module on no rung, a module naming a higher rung, two modules naming
/// each other. A rung lists modules by name, or every file of a folder as `dir/*` (a module
/// placed by name goes first).
fn ladder_faults(
    ladder: &[(&str, &[&str])],
    name: &str,
    imports: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<String> {
    let rung = |m: &str| {
        ladder
            .iter()
            .position(|(_, ms)| ms.contains(&m))
            .or_else(|| {
                ladder.iter().position(|(_, ms)| {
                    ms.iter().any(|p| {
                        p.strip_suffix("/*").is_some_and(|dir| {
                            m.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
                        })
                    })
                })
            })
    };
    let mut wrong = Vec::new();
    for (module, names) in imports {
        let Some(mine) = rung(module) else {
            wrong.push(format!("`{module}` is on no rung: place it in {name}"));
            continue;
        };
        for n in names {
            match rung(n) {
                Some(theirs) if theirs > mine => wrong.push(format!(
                    "`{module}` ({}) names `{n}` ({}), a higher rung",
                    ladder[mine].0, ladder[theirs].0
                )),
                None if imports.contains_key(n) => {
                    wrong.push(format!("`{n}` is on no rung: place it in {name}"))
                }
                _ => {}
            }
            if imports.get(n).is_some_and(|back| back.contains(module)) && module < n {
                wrong.push(format!("`{module}` and `{n}` name each other"));
            }
        }
    }
    wrong
}

#[test]
fn the_engine_is_a_ladder() {
    let imports = crate_imports("crates/engine/src/");
    let wrong = ladder_faults(LADDER, "LADDER", &imports);
    assert!(
        imports.len() > 20,
        "found only {} engine modules",
        imports.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_runtime_is_a_ladder() {
    let imports = crate_imports("crates/runtime/src/");
    let wrong = ladder_faults(RUNTIME_LADDER, "RUNTIME_LADDER", &imports);
    assert!(
        imports.len() > 15,
        "found only {} runtime modules",
        imports.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every rung names modules that exist: a ladder does not keep a module that moved away.
#[test]
fn every_rung_names_a_module_that_exists() {
    for (src, ladder) in [
        ("crates/engine/src/", LADDER),
        ("crates/runtime/src/", RUNTIME_LADDER),
    ] {
        let imports = crate_imports(src);
        for (rung, modules) in ladder {
            for m in *modules {
                assert!(
                    imports.contains_key(*m),
                    "`{m}` ({rung}) is not a module of {src}"
                );
            }
        }
    }
}

/// The launcher's rungs, bottom first, by file (`src/` dropped, `.rs` dropped: `cmd/serve`,
/// `wiring/mod`; `dir/*` is every file of a folder). A file may name (`crate::x`,
/// `super::x`) files on its own rung or below. A new file must be placed here.
const LAUNCHER_LADDER: &[(&str, &[&str])] = &[
    (
        "plain parts",
        &[
            "launcher",
            "cli",
            "token",
            "recent",
            "metrics",
            "approvals",
            "features",
            "integrity",
            "permissions",
        ],
    ),
    ("a running Strata", &["storage", "wiring/*"]),
    (
        "surfaces and what serve runs",
        &[
            "http",
            "cluster",
            "discord",
            "preflight",
            "schedules",
            "remote",
        ],
    ),
    ("commands", &["cmd/*"]),
    ("crate roots", &["lib", "main"]),
];

/// For each launcher file (by path under `src/`, without `.rs`), the files it names: a
/// `crate::a::b::…`, `super::…` or `self::…` path, or a bare `x::…` where the file declares
/// `mod x;`, goes to the longest prefix that is a file (`a/b.rs` or `a/b/mod.rs`), else to the
/// crate root, `lib`.
fn launcher_imports() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let re = regex::Regex::new(r"\b(crate|super|self)((?:::(?:[A-Za-z_][A-Za-z0-9_]*))+)")
        .expect("regex");
    // Root re-exports named by type, mapped to the file that defines them.
    let by_type = [
        ("Exit", "launcher"),
        ("Launcher", "launcher"),
        ("Cli", "cli"),
    ];
    let files: std::collections::BTreeMap<String, String> = sources()
        .into_iter()
        .filter_map(|(file, code)| {
            let rel = file.strip_prefix("crates/launcher/src/")?;
            Some((rel.trim_end_matches(".rs").to_owned(), code))
        })
        .collect();
    // The module path of a file: `cmd/mod` is `cmd`, `lib` and `main` are the root.
    let module_of = |file: &str| -> Vec<String> {
        let mut segs: Vec<String> = file.split('/').map(str::to_owned).collect();
        if segs.last().is_some_and(|s| s == "mod") {
            segs.pop();
        }
        if segs == ["lib"] || segs == ["main"] {
            segs.clear();
        }
        segs
    };
    let resolve = |segs: &[String]| -> String {
        if let [one] = segs
            && let Some((_, f)) = by_type.iter().find(|(t, _)| t == one)
        {
            return (*f).to_owned();
        }
        for k in (1..=segs.len()).rev() {
            let path = segs[..k].join("/");
            if files.contains_key(&path) {
                return path;
            }
            let dir = format!("{path}/mod");
            if files.contains_key(&dir) {
                return dir;
            }
        }
        "lib".to_owned()
    };
    let declared = regex::Regex::new(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;")
        .expect("regex");
    let mut out = std::collections::BTreeMap::new();
    for (file, code) in &files {
        let here = module_of(file);
        let entry: &mut std::collections::BTreeSet<String> = out.entry(file.clone()).or_default();
        let lines: Vec<&str> = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        // A file with `mod x;` names its child by a bare path too (`x::run`, `use x::…`).
        let children: Vec<&str> = lines
            .iter()
            .filter_map(|l| declared.captures(l))
            .filter_map(|c| c.get(1))
            .map(|m| m.as_str())
            .collect();
        let bare = (!children.is_empty()).then(|| {
            regex::Regex::new(&format!(
                r"(?:^|[^:\w])({})((?:::[A-Za-z_][A-Za-z0-9_]*)+)",
                children.join("|")
            ))
            .expect("regex")
        });
        for line in &lines {
            for c in bare.iter().flat_map(|b| b.captures_iter(line)) {
                let segs: Vec<String> = here
                    .iter()
                    .cloned()
                    .chain(std::iter::once(c[1].to_owned()))
                    .chain(c[2].split("::").skip(1).map(str::to_owned))
                    .collect();
                let target = resolve(&segs);
                if target != *file {
                    entry.insert(target);
                }
            }
            for c in re.captures_iter(line) {
                let rest = c[2].split("::").skip(1).map(str::to_owned);
                let segs: Vec<String> = match &c[1] {
                    "super" => here[..here.len().saturating_sub(1)]
                        .iter()
                        .cloned()
                        .chain(rest)
                        .collect(),
                    "self" => here.iter().cloned().chain(rest).collect(),
                    _ => rest.collect(),
                };
                let target = resolve(&segs);
                if target != *file {
                    entry.insert(target);
                }
            }
        }
    }
    out
}

#[test]
fn the_launcher_is_a_ladder() {
    let imports = launcher_imports();
    let wrong = ladder_faults(LAUNCHER_LADDER, "LAUNCHER_LADDER", &imports);
    assert!(
        imports.len() > 30 && imports.keys().any(|f| f.starts_with("cmd/")),
        "found only {} launcher files",
        imports.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The rungs of docs/ARCHITECTURE.md's ladder table (`| rung | files |`) in the section
/// headed `### \`crates/<krate>\``: (rung, the files named in backticks outside parentheses,
/// a folder's `/` dropped).
fn documented_ladder(krate: &str) -> Vec<(String, std::collections::BTreeSet<String>)> {
    let doc = std::fs::read_to_string(workspace().join("docs/ARCHITECTURE.md")).expect("docs");
    let heading = format!("### `crates/{krate}`");
    let section = doc
        .split_once(&heading)
        .map(|(_, rest)| rest.split_once("\n### ").map_or(rest, |(s, _)| s))
        .unwrap_or_else(|| panic!("docs/ARCHITECTURE.md has a `crates/{krate}` section"));
    let table = section
        .split_once("| rung | files |")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("the `crates/{krate}` section has a `| rung | files |` table"));
    let mut rungs = Vec::new();
    for row in table
        .lines()
        .skip(1)
        .map(str::trim)
        .take_while(|l| l.starts_with('|'))
    {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        if cells
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        let [rung, files] = cells[..] else {
            panic!("a ladder row with other than two cells: {row}");
        };
        // Backticked names outside parentheses: `tool` (`Tool`, `Env`) names one file.
        let (mut depth, mut names, mut quoted) = (0, std::collections::BTreeSet::new(), None);
        for (i, c) in files.char_indices() {
            match c {
                '(' if quoted.is_none() => depth += 1,
                ')' if quoted.is_none() => depth -= 1,
                '`' => match quoted.take() {
                    None => quoted = Some(i + 1),
                    Some(start) if depth == 0 => {
                        names.insert(files[start..i].trim_end_matches('/').to_owned());
                    }
                    Some(_) => {}
                },
                _ => {}
            }
        }
        rungs.push((rung.to_owned(), names));
    }
    rungs
}

/// Fails unless docs/ARCHITECTURE.md's ladder table for `crates/<krate>` is `ladder` (named
/// `name` in the message): same rungs in the same order, same files on each.
fn assert_documented(krate: &str, ladder: &[(&str, &[&str])], name: &str) {
    let documented = documented_ladder(krate);
    let tested: Vec<(String, std::collections::BTreeSet<String>)> = ladder
        .iter()
        .map(|(rung, files)| {
            (
                (*rung).to_owned(),
                files.iter().map(|f| (*f).to_owned()).collect(),
            )
        })
        .collect();
    let show = |rungs: &[(String, std::collections::BTreeSet<String>)]| {
        rungs
            .iter()
            .map(|(r, fs)| {
                format!(
                    "  {r}: {}",
                    fs.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        documented == tested,
        "docs/ARCHITECTURE.md's ladder table (`crates/{krate}`) is not tidy.rs's {name}: same \
         rungs in the same order, same files on each.\ndocumented:\n{}\n{name}:\n{}",
        show(&documented),
        show(&tested)
    );
}

#[test]
fn the_documented_ladder_is_the_tested_one() {
    assert_documented("engine", LADDER, "LADDER");
}

#[test]
fn the_documented_runtime_ladder_is_the_tested_one() {
    assert_documented("runtime", RUNTIME_LADDER, "RUNTIME_LADDER");
}

#[test]
fn the_documented_launcher_ladder_is_the_tested_one() {
    assert_documented("launcher", LAUNCHER_LADDER, "LAUNCHER_LADDER");
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

/// The manifests of the workspace: the root's and every member's, relative to the root.
fn manifests() -> Vec<(String, String)> {
    let root = workspace();
    let text = std::fs::read_to_string(root.join("Cargo.toml")).expect("root Cargo.toml");
    // The `members = [ … ]` list of the root, and every crate folder beside them (a crate not
    // yet listed is still held to the rule).
    let listed = text
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("the root Cargo.toml lists its members");
    let mut dirs: std::collections::BTreeSet<String> = listed
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    for parent in ["crates", "modules"] {
        for e in std::fs::read_dir(root.join(parent))
            .into_iter()
            .flatten()
            .flatten()
        {
            if e.path().join("Cargo.toml").is_file() {
                dirs.insert(format!("{parent}/{}", e.file_name().to_string_lossy()));
            }
        }
    }
    let mut out = vec![("Cargo.toml".to_owned(), text)];
    for d in dirs {
        let rel = format!("{d}/Cargo.toml");
        let text = std::fs::read_to_string(root.join(&rel)).expect("member Cargo.toml");
        out.push((rel, text));
    }
    assert!(
        out.len() > 20,
        "found only {} manifests: is the member list still `members = [ … ]`?",
        out.len()
    );
    out
}

/// One dependency of a manifest: its section, its name, and the keys it sets with their values.
struct Dependency {
    section: String,
    name: String,
    keys: Vec<(String, String)>,
}

/// The dependency entries of a manifest, line-based: for each `[dependencies]`,
/// `[dev-dependencies]`, `[build-dependencies]` and `[target.….dependencies]` section (and
/// `[workspace.dependencies]` when `workspace` is set), every dependency — `x = "1"` gives `version`; `x.workspace = true` gives `workspace`; an inline
/// table gives its keys; a `[dependencies.x]` table gives its lines.
fn dependency_entries(text: &str, workspace: bool) -> Vec<Dependency> {
    fn is_dep_section(name: &str, workspace: bool) -> bool {
        let kinds = ["dependencies", "dev-dependencies", "build-dependencies"];
        if workspace {
            return name == "workspace.dependencies";
        }
        kinds.contains(&name)
            || name
                .strip_prefix("target.")
                .is_some_and(|rest| kinds.iter().any(|k| rest.ends_with(&format!(".{k}"))))
    }
    // Split `a = 1, b = [2, 3]` at the commas outside brackets and strings.
    fn pairs(inline: &str) -> Vec<(String, String)> {
        let (mut depth, mut quoted, mut start) = (0i32, false, 0);
        let mut parts = Vec::new();
        for (i, c) in inline.char_indices() {
            match c {
                '"' => quoted = !quoted,
                '[' | '{' if !quoted => depth += 1,
                ']' | '}' if !quoted => depth -= 1,
                ',' if !quoted && depth == 0 => {
                    parts.push(&inline[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inline[start..]);
        parts
            .into_iter()
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect()
    }
    let mut out: Vec<Dependency> = Vec::new();
    // The section, whether it holds dependencies, the `x` of a `[….dependencies.x]` table.
    let mut section: (String, bool, Option<String>) = (String::new(), false, None);
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.split(" #").next().unwrap_or(line).trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            let header = header.trim();
            section = if is_dep_section(header, workspace) {
                (header.to_owned(), true, None)
            } else {
                // `[dependencies.x]`, `[target.….dependencies.x]`
                match header.rsplit_once('.') {
                    Some((sec, dep)) if is_dep_section(sec, workspace) => {
                        let name = dep.trim_matches('"').to_owned();
                        out.push(Dependency {
                            section: sec.to_owned(),
                            name: name.clone(),
                            keys: Vec::new(),
                        });
                        (sec.to_owned(), true, Some(name))
                    }
                    _ => (header.to_owned(), false, None),
                }
            };
            continue;
        }
        if !section.1 {
            continue;
        }
        // A value may go on over several lines (a features array): read until the brackets
        // close.
        let mut entry = line.to_owned();
        let open =
            |s: &str| s.matches(['[', '{']).count() as i64 - s.matches([']', '}']).count() as i64;
        while open(&entry) > 0 {
            match lines.next() {
                Some(more) => entry.push_str(more.split(" #").next().unwrap_or(more).trim()),
                None => break,
            }
        }
        let Some((key, value)) = entry.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let (name, keys) = match &section.2 {
            Some(dep) => (dep.clone(), vec![(key.to_owned(), value.to_owned())]),
            None => match key.split_once('.') {
                Some((name, sub)) => (
                    name.trim().to_owned(),
                    vec![(sub.trim().to_owned(), value.to_owned())],
                ),
                None if value.starts_with('{') => (
                    key.to_owned(),
                    pairs(value.trim_start_matches('{').trim_end_matches('}')),
                ),
                None => (
                    key.to_owned(),
                    vec![("version".to_owned(), value.to_owned())],
                ),
            },
        };
        let name = name.trim_matches('"').to_owned();
        match out
            .iter_mut()
            .find(|d| d.section == section.0 && d.name == name)
        {
            Some(d) => d.keys.extend(keys),
            None => out.push(Dependency {
                section: section.0.clone(),
                name,
                keys,
            }),
        }
    }
    out
}

#[test]
fn every_external_crate_is_declared_once_in_the_workspace() {
    let mut wrong = Vec::new();
    let mut declared = 0;
    for (manifest, text) in manifests() {
        for Dependency {
            section,
            name,
            keys,
        } in dependency_entries(&text, false)
        {
            declared += 1;
            let get = |k: &str| {
                keys.iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.as_str())
            };
            // A crate in a folder of the workspace may be named by its path.
            if get("path").is_some() && get("version").is_none() && get("git").is_none() {
                continue;
            }
            let strays: Vec<&str> = keys
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| !["workspace", "features", "optional"].contains(k))
                .collect();
            if get("workspace") != Some("true") || !strays.is_empty() {
                let what = if strays.is_empty() {
                    String::new()
                } else {
                    format!(" (it sets {})", strays.join(", "))
                };
                wrong.push(format!(
                    "{manifest} [{section}] `{name}`{what}: declare it once, in the root \
                     Cargo.toml's [workspace.dependencies], and name it here as \
                     `{name}.workspace = true` (or `{{ workspace = true, features = […] }}`)"
                ));
            }
        }
    }
    // Once: no crate under two names in [workspace.dependencies] (`package = "…"`).
    let root = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("root Cargo.toml");
    let mut seen = std::collections::BTreeMap::new();
    for Dependency { name, keys, .. } in dependency_entries(&root, true) {
        let krate = keys
            .iter()
            .find(|(k, _)| k == "package")
            .map_or(name.clone(), |(_, v)| v.trim_matches('"').to_owned());
        if let Some(first) = seen.insert(krate.clone(), name.clone()) {
            wrong.push(format!(
                "Cargo.toml [workspace.dependencies] declares `{krate}` twice (`{first}` and \
                 `{name}`)"
            ));
        }
    }
    assert!(
        declared > 200 && seen.len() > 50,
        "read only {declared} dependencies of the members and {} of the workspace: has the \
         manifests' layout changed?",
        seen.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

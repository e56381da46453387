//! `strata memory search|list|show|forget|stats|export|import|decay` (local; the operator
//! sees every scope).

use std::io::{BufRead, Write};
use std::sync::Arc;

use serde_json::{Value, json};
use strata_engine::memory::{
    Memory, MemoryQuery, MemoryScope, MemoryType, NewMemory, SearchMode, Viewer,
};
use strata_memory::{Backend, MemoryMaintenance};

use crate::Exit;
use crate::cli::MemoryCommand;
use crate::cmd::context::{Context, Progress};

fn fail(msg: impl std::fmt::Display) -> Exit {
    eprintln!("error: {msg}");
    Exit::Failure
}

fn usage(msg: impl std::fmt::Display) -> Exit {
    eprintln!("error: {msg}");
    Exit::Usage
}

fn line(m: &Memory) -> String {
    format!(
        "{}  {:<10} {:<22} {:.2}{}  {}",
        m.id,
        m.memory_type.as_str(),
        m.scope.to_string(),
        m.confidence,
        if m.pinned { " pinned" } else { "" },
        m.content.replace('\n', " ")
    )
}

fn print(list: &[Memory], json: bool) -> Exit {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "memories": list })).unwrap_or_default()
        );
    } else if list.is_empty() {
        println!("no memories");
    } else {
        for m in list {
            println!("{}", line(m));
        }
    }
    Exit::Ok
}

fn kept(b: &Backend) -> Result<&Arc<dyn MemoryMaintenance>, Exit> {
    match b {
        Backend::Kept(s) => Ok(s),
        Backend::Honcho(_) => Err(fail(
            "this command needs `memory.backend: sqlite` or `postgres`; Honcho keeps its memory on its server",
        )),
    }
}

/// Parses one import line.
fn parse_import(v: Value) -> Result<NewMemory, String> {
    let obj = v.as_object().ok_or("not a JSON object")?;
    let content = obj
        .get("content")
        .and_then(Value::as_str)
        .ok_or("no string field `content`")?
        .to_owned();
    let scope: MemoryScope = obj
        .get("scope")
        .and_then(Value::as_str)
        .unwrap_or("global")
        .parse()
        .map_err(|e: strata_engine::memory::MemoryError| e.message().to_owned())?;
    let memory_type = match obj.get("type").and_then(Value::as_str) {
        None => MemoryType::Semantic,
        Some(t) => MemoryType::parse(t).ok_or_else(|| format!("unknown type `{t}`"))?,
    };
    Ok(NewMemory {
        content,
        memory_type,
        category: obj
            .get("category")
            .and_then(Value::as_str)
            .map(str::to_owned),
        tags: obj
            .get("tags")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        scope,
        pinned: obj.get("pinned").and_then(Value::as_bool).unwrap_or(false),
        created_by: obj
            .get("created_by")
            .and_then(Value::as_str)
            .unwrap_or("operator")
            .to_owned(),
        confidence: obj
            .get("confidence")
            .and_then(Value::as_f64)
            .map(|c| c as f32),
        taint: None,
        idempotency_key: None,
    })
}

/// Runs a memory command.
pub fn run(l: &Context, command: MemoryCommand) -> Exit {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let backend = match rt.block_on(crate::wiring::env(&l.config)) {
        Ok((_, Some(b))) => b,
        Ok((_, None)) => return fail("memory is off (`memory.backend: none`)"),
        Err(e) => return fail(e),
    };
    let mem = backend.as_dyn();
    let op = Viewer::operator();
    rt.block_on(async move {
        match command {
            MemoryCommand::Search {
                query,
                limit,
                mode,
                json,
            } => {
                let mode = match mode.as_str() {
                    "keyword" => SearchMode::Keyword,
                    "semantic" => SearchMode::Semantic,
                    "hybrid" => SearchMode::Hybrid,
                    m => return usage(format!("--mode `{m}`: use keyword, semantic or hybrid")),
                };
                let q = MemoryQuery {
                    text: query,
                    limit: limit.clamp(1, 100),
                    mode,
                    ..Default::default()
                };
                match mem.search(&op, &q).await {
                    Ok(list) => print(&list, json),
                    Err(e) => fail(e),
                }
            }
            MemoryCommand::List {
                since,
                scope,
                limit,
                json,
            } => {
                let since = match since.as_deref() {
                    None => None,
                    Some(s) => match s.parse::<i64>() {
                        Ok(n) => Some(n),
                        Err(_) => match humantime::parse_rfc3339_weak(s) {
                            Ok(t) => t
                                .duration_since(std::time::UNIX_EPOCH)
                                .ok()
                                .map(|d| d.as_secs() as i64),
                            Err(e) => return usage(format!("--since `{s}`: {e}")),
                        },
                    },
                };
                let scope = match scope.as_deref().map(str::parse::<MemoryScope>).transpose() {
                    Ok(s) => s,
                    Err(e) => return usage(e),
                };
                match mem
                    .list(&op, since, scope.as_ref(), limit.clamp(1, 10_000))
                    .await
                {
                    Ok(list) => print(&list, json),
                    Err(e) => fail(e),
                }
            }
            MemoryCommand::Show { id } => match mem.get(&op, &id).await {
                Ok(Some(m)) => {
                    println!("{}", serde_json::to_string_pretty(&m).unwrap_or_default());
                    if let Backend::Kept(s) = &backend
                        && let Ok(h) = s.history(&id).await
                    {
                        for (ts, action, actor, reason) in h {
                            println!(
                                "{ts}  {action:<8} {actor}{}",
                                reason.map(|r| format!(": {r}")).unwrap_or_default()
                            );
                        }
                    }
                    Exit::Ok
                }
                Ok(None) => fail(format!("no memory `{id}`")),
                Err(e) => fail(e),
            },
            MemoryCommand::Forget { id, reason } => {
                match mem.forget(&op, &id, &reason, "operator").await {
                    Ok(true) => {
                        println!("forgot {id}");
                        Exit::Ok
                    }
                    Ok(false) => fail(format!("no memory `{id}`")),
                    Err(e) => fail(e),
                }
            }
            MemoryCommand::Stats { json } => {
                let s = match kept(&backend) {
                    Ok(s) => s,
                    Err(e) => return e,
                };
                match s.stats().await {
                    Ok(st) if json => {
                        println!("{}", serde_json::to_string_pretty(&st).unwrap_or_default());
                        Exit::Ok
                    }
                    Ok(st) => {
                        println!(
                            "{} memories ({} archived, {} pinned, {} with vectors) in {}",
                            st.total,
                            st.archived,
                            st.pinned,
                            st.with_vectors,
                            s.location()
                        );
                        let mut scopes: Vec<_> = st.by_scope.into_iter().collect();
                        scopes.sort();
                        for (k, v) in scopes {
                            println!("  {k:<30} {v}");
                        }
                        Exit::Ok
                    }
                    Err(e) => fail(e),
                }
            }
            MemoryCommand::Export { file } => {
                let s = match kept(&backend) {
                    Ok(s) => s,
                    Err(e) => return e,
                };
                let all = match s.export().await {
                    Ok(a) => a,
                    Err(e) => return fail(e),
                };
                let mut out: Box<dyn Write> = match &file {
                    Some(p) => match std::fs::File::create(p) {
                        Ok(f) => Box::new(std::io::BufWriter::new(f)),
                        Err(e) => return fail(format!("{}: {e}", p.display())),
                    },
                    None => Box::new(std::io::stdout().lock()),
                };
                for m in &all {
                    if writeln!(out, "{}", serde_json::to_string(m).unwrap_or_default()).is_err() {
                        return fail("write failed");
                    }
                }
                if out.flush().is_err() {
                    return fail("write failed");
                }
                if file.is_some() {
                    eprintln!("exported {} memories", all.len());
                }
                Exit::Ok
            }
            MemoryCommand::Import { input } => {
                let reader: Box<dyn BufRead> = if input == "-" {
                    Box::new(std::io::BufReader::new(std::io::stdin()))
                } else {
                    match std::fs::File::open(&input) {
                        Ok(f) => Box::new(std::io::BufReader::new(f)),
                        Err(e) => return fail(format!("{input}: {e}")),
                    }
                };
                let mut bad = 0;
                let mut stdout = std::io::stdout();
                // The ids go to stdout; piped away, a count on the terminal shows it moving.
                let progress = (!std::io::IsTerminal::is_terminal(&stdout))
                    .then(|| Progress::start("importing memories"));
                let mut stored_n = 0u64;
                for (i, l) in reader.lines().enumerate() {
                    let l = match l {
                        Ok(l) => l,
                        Err(e) => return fail(format!("line {}: {e}", i + 1)),
                    };
                    if l.trim().is_empty() {
                        continue;
                    }
                    let parsed = serde_json::from_str::<Value>(&l)
                        .map_err(|e| e.to_string())
                        .and_then(parse_import);
                    match parsed {
                        Ok(m) => match mem.store(&op, m).await {
                            Ok(stored) => {
                                // Printed only after the commit: what is printed is stored.
                                let _ = writeln!(stdout, "{}", stored.id());
                                let _ = stdout.flush();
                                stored_n += 1;
                                if let Some(p) = &progress {
                                    p.set(format!("importing memories: {stored_n} stored"));
                                }
                            }
                            Err(e) => {
                                eprintln!("error: line {}: {e}", i + 1);
                                bad += 1;
                            }
                        },
                        Err(e) => {
                            eprintln!("error: line {}: {e}", i + 1);
                            bad += 1;
                        }
                    }
                }
                drop(progress);
                if bad > 0 { Exit::Usage } else { Exit::Ok }
            }
            MemoryCommand::Decay { dry_run, json } => {
                let s = match kept(&backend) {
                    Ok(s) => s,
                    Err(e) => return e,
                };
                match s.decay(dry_run).await {
                    Ok(r) if json => {
                        println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
                        Exit::Ok
                    }
                    Ok(r) => {
                        let verb = if dry_run { "would" } else { "did" };
                        println!(
                            "{verb} decay {} memories, archive {}, purge {}",
                            r.decayed,
                            r.archived.len(),
                            r.purged.len()
                        );
                        for id in &r.archived {
                            println!("  archive {id}");
                        }
                        for id in &r.purged {
                            println!("  purge   {id}");
                        }
                        Exit::Ok
                    }
                    Err(e) => fail(e),
                }
            }
        }
    })
}

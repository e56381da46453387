//! `search_notes` on a real temp tree: .gitignore, binary and huge files, ranking, context,
//! folder restriction.

use std::sync::Arc;

use serde_json::{Value, json};
use strata_engine::audit::NoAudit;
use strata_engine::config::Config;
use strata_engine::{Env, Principal};
use strata_runtime::{Invocation, Invoker, Registry, Status};

fn setup() -> (tempfile::TempDir, Invoker) {
    let _ = strata_tools::link();
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    for sub in [
        "knowledgebase/ops",
        "knowledgebase/build",
        "codex",
        "config",
    ] {
        std::fs::create_dir_all(d.join(sub)).expect("mkdir");
    }
    let w = |p: &str, c: &[u8]| std::fs::write(d.join(p), c).expect("write");
    w("knowledgebase/ops/backup.md", b"# Backups\nThe backup server is nightjar.\nRestore with the restore-db script.\nAsk ops first.\n");
    w(
        "knowledgebase/ops/network.md",
        b"Routers: two.\nThe backup link is slow.\n",
    );
    w(
        "codex/style.md",
        b"Prefer short functions.\nNo backup talk here.\n",
    );
    w("knowledgebase/.gitignore", b"drafts/\n*.tmp\n");
    std::fs::create_dir_all(d.join("knowledgebase/drafts")).expect("mkdir");
    w(
        "knowledgebase/drafts/secret-plan.md",
        b"backup server password is hunter2\n",
    );
    w("knowledgebase/scratch.tmp", b"backup scratch\n");
    w(
        "knowledgebase/build/blob.bin",
        b"backup\x00\x01\x02 server binary",
    );
    w("knowledgebase/secrets.enc", b"backup server vault");
    let mut big = b"backup server huge\n".to_vec();
    big.resize(9 * 1024 * 1024, b'x');
    w("knowledgebase/build/huge.log", &big);
    let env = Arc::new(Env::new(Config::default(), d.to_path_buf(), d.join("data")));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    (dir, Invoker::new(reg, env, Arc::new(NoAudit)))
}

async fn search(inv: &Invoker, args: Value) -> strata_runtime::InvocationResult {
    inv.invoke(Invocation::new("search_notes", args, Principal::Operator))
        .await
}

#[tokio::test]
async fn finds_ranks_and_respects_ignores() {
    let (_d, inv) = setup();
    let r = search(&inv, json!({"query": "backup server"})).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let results = r.value["results"].as_array().cloned().unwrap_or_default();
    let at: Vec<(String, u64)> = results
        .iter()
        .map(|h| {
            (
                h["path"].as_str().unwrap_or_default().to_owned(),
                h["line"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    // Both words first, then one word in folder and path order; nothing ignored, binary,
    // huge or secret.
    assert_eq!(
        at,
        [
            ("knowledgebase/ops/backup.md".to_owned(), 2),
            ("knowledgebase/ops/backup.md".to_owned(), 1),
            ("knowledgebase/ops/network.md".to_owned(), 2),
            ("codex/style.md".to_owned(), 2),
        ]
    );
    assert_eq!(results[0]["text"], "The backup server is nightjar.");
    assert_eq!(
        results[0]["context"],
        json!(["# Backups", "Restore with the restore-db script."])
    );
    // Punctuation in the query is literal, never a pattern.
    let r = search(&inv, json!({"query": "restore-db (script"})).await;
    assert_eq!(r.value["results"][0]["line"], 3, "{r:?}");
    // One folder only; folders outside the notes dirs are refused.
    let r = search(&inv, json!({"query": "backup", "dir": "codex"})).await;
    assert_eq!(r.value["results"].as_array().map(Vec::len), Some(1));
    let r = search(&inv, json!({"query": "backup", "dir": "config"})).await;
    assert_eq!(r.status, Status::Error, "{r:?}");
    let r = search(&inv, json!({"query": "x"})).await;
    assert_eq!(r.status, Status::ValidationError);
    let r = search(&inv, json!({"query": "backup", "max_results": 1})).await;
    assert_eq!(r.value["truncated"], true);
}

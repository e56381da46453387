//! File tools through the real Invoker on a temp overlay: contents, limits, and every way out
//! of the roots refused.

use std::sync::Arc;

use serde_json::{Value, json};
use strata_engine::audit::NoAudit;
use strata_engine::config::Config;
use strata_engine::{Env, Principal};
use strata_runtime::{Invocation, Invoker, Registry, Status};

struct Overlay {
    dir: tempfile::TempDir,
    invoker: Invoker,
}

fn overlay() -> Overlay {
    assert!(strata_tools::link().contains(&"read_file"));
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    for sub in ["agents/main", "tmp", "knowledgebase/notes", "config"] {
        std::fs::create_dir_all(d.join(sub)).expect("mkdir");
    }
    std::fs::write(d.join("agents/main/AGENTS.md"), "# Main\nYou help.\n").expect("w");
    std::fs::write(d.join("knowledgebase/notes/a.md"), "alpha").expect("w");
    std::fs::write(d.join("knowledgebase/notes/b.txt"), "beta").expect("w");
    std::fs::write(d.join("knowledgebase/top.md"), "top").expect("w");
    std::fs::write(d.join("config/secrets.enc"), "do not read").expect("w");
    std::fs::write(d.join("tmp/bin.dat"), [0u8, 1, 2, 3]).expect("w");
    let outside = d.join("outside.txt");
    std::fs::write(&outside, "outside").expect("w");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&outside, d.join("tmp/link-out")).expect("symlink");
        std::os::unix::fs::symlink(d.join("config"), d.join("tmp/config-dir")).expect("symlink");
    }
    let env = Arc::new(Env::new(Config::default(), d.to_path_buf(), d.join("data")));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    Overlay {
        invoker: Invoker::new(reg, env, Arc::new(NoAudit)),
        dir,
    }
}

async fn call(o: &Overlay, tool: &str, args: Value) -> strata_runtime::InvocationResult {
    o.invoker
        .invoke(Invocation::new(tool, args, Principal::Operator))
        .await
}

#[tokio::test]
async fn reads_text_inside_roots() {
    let o = overlay();
    let r = call(&o, "read_file", json!({"path": "agents/main/AGENTS.md"})).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.value["content"], "# Main\nYou help.\n");
    assert_eq!(r.value["truncated"], false);
    assert_eq!(r.value["size"], 17);

    let r = call(
        &o,
        "read_file",
        json!({"path": "agents/main/AGENTS.md", "max_bytes": 6}),
    )
    .await;
    assert_eq!(r.value["content"], "# Main");
    assert_eq!(r.value["truncated"], true);

    let abs = o.dir.path().join("knowledgebase/top.md");
    let r = call(
        &o,
        "read_file",
        json!({"path": abs.to_str().expect("utf8")}),
    )
    .await;
    assert_eq!(r.value["content"], "top");
}

#[tokio::test]
async fn truncation_never_splits_a_character() {
    let o = overlay();
    std::fs::write(o.dir.path().join("tmp/utf8.txt"), "aé").expect("w"); // é is 2 bytes
    let r = call(
        &o,
        "read_file",
        json!({"path": "tmp/utf8.txt", "max_bytes": 2}),
    )
    .await;
    assert_eq!(r.value["content"], "a");
    assert_eq!(r.value["truncated"], true);
}

#[tokio::test]
async fn refuses_every_escape() {
    let o = overlay();
    let outside = o.dir.path().join("outside.txt");
    let cases = [
        "../outside.txt".to_owned(),
        "agents/../outside.txt".to_owned(),
        "agents/main/../../../../../etc/passwd".to_owned(),
        outside.to_str().expect("utf8").to_owned(),
        "/etc/passwd".to_owned(),
        "config/secrets.enc".to_owned(),
        "tmp/link-out".to_owned(),
        "tmp/config-dir/secrets.enc".to_owned(),
    ];
    for path in cases {
        let r = call(&o, "read_file", json!({"path": path})).await;
        assert_eq!(r.status, Status::Error, "{path}: {r:?}");
        let msg = r.error.expect("message");
        assert!(msg.contains("outside the allowed roots"), "{path}: {msg}");
        assert!(
            !r.value.to_string().contains("outside"),
            "{path}: content leaked"
        );
    }
}

#[tokio::test]
async fn clear_errors_for_bad_input() {
    let o = overlay();
    let r = call(&o, "read_file", json!({"path": "tmp/bin.dat"})).await;
    assert!(r.error.expect("msg").contains("binary"));
    let r = call(&o, "read_file", json!({"path": "tmp/missing.txt"})).await;
    assert_eq!(r.status, Status::Error);
    let r = call(&o, "read_file", json!({"path": "knowledgebase"})).await;
    assert!(r.error.expect("msg").contains("is a directory"));
    let r = call(&o, "read_file", json!({"path": "tmp/x", "max_bytes": 0})).await;
    assert_eq!(r.status, Status::ValidationError);
    assert!(r.error.expect("msg").contains("max_bytes"));
    let r = call(&o, "read_file", json!({})).await;
    assert_eq!(r.status, Status::ValidationError);
    assert!(r.error.expect("msg").contains("`path`"));
}

fn paths(v: &Value) -> Vec<String> {
    v["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["path"].as_str().expect("path").to_owned())
        .collect()
}

#[tokio::test]
async fn lists_with_glob_limit_and_without_following_symlinks() {
    let o = overlay();
    let r = call(
        &o,
        "list_files",
        json!({"path": "knowledgebase", "glob": "**/*.md"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(
        paths(&r.value),
        ["knowledgebase/notes/a.md", "knowledgebase/top.md"]
    );

    let r = call(
        &o,
        "list_files",
        json!({"path": "knowledgebase", "glob": "*.md"}),
    )
    .await;
    assert_eq!(paths(&r.value), ["knowledgebase/top.md"]);

    let r = call(&o, "list_files", json!({})).await;
    let all = paths(&r.value);
    assert!(all.contains(&"agents/main/AGENTS.md".to_owned()), "{all:?}");
    assert!(all.contains(&"tmp/link-out".to_owned()));
    assert!(!all.iter().any(|p| p.contains("secrets.enc")), "{all:?}");
    assert!(!all.iter().any(|p| p.starts_with("config")), "{all:?}");

    let r = call(&o, "list_files", json!({"limit": 2})).await;
    assert_eq!(paths(&r.value).len(), 2);
    assert_eq!(r.value["truncated"], true);

    let r = call(&o, "list_files", json!({"path": ".."})).await;
    assert!(r.error.expect("msg").contains("outside the allowed roots"));
    let r = call(&o, "list_files", json!({"path": "tmp/link-out"})).await;
    assert_eq!(r.status, Status::Error);
    let r = call(
        &o,
        "list_files",
        json!({"path": "knowledgebase", "glob": "[bad"}),
    )
    .await;
    assert_eq!(r.status, Status::ValidationError);
}

#[test]
fn tools_are_core() {
    let reg = Registry::from_inventory(&[]).expect("registry");
    for name in strata_tools::link() {
        let t = reg.get(name).expect("registered");
        assert_eq!(t.layer.to_string(), "core");
    }
}

#[tokio::test]
async fn secrets_and_the_data_dir_are_refused_even_inside_a_root() {
    let o = overlay();
    // A vault file and a database that sit under roots.
    std::fs::write(o.dir.path().join("knowledgebase/secrets.enc"), "vault").expect("w");
    std::fs::create_dir_all(o.dir.path().join("data")).expect("mkdir");
    std::fs::write(o.dir.path().join("data/strata.db"), "db").expect("w");
    let r = call(
        &o,
        "read_file",
        json!({"path": "knowledgebase/secrets.enc"}),
    )
    .await;
    assert_eq!(r.status, Status::Error);
    assert!(r.error.expect("msg").contains("protected"));
    let r = call(&o, "list_files", json!({"path": "knowledgebase"})).await;
    assert!(!r.value.to_string().contains("secrets.enc"), "{}", r.value);
}

#[tokio::test]
async fn writes_atomically_inside_roots_and_nowhere_else() {
    let o = overlay();
    let d = o.dir.path();
    let r = call(
        &o,
        "write_file",
        json!({"path": "tmp/new/dir/report.md", "content": "line 1\n"}),
    )
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(
        (r.value["created"].as_bool(), r.value["size"].as_u64()),
        (Some(true), Some(7))
    );
    let r = call(
        &o,
        "write_file",
        json!({"path": "tmp/new/dir/report.md", "content": "line 2\n", "append": true}),
    )
    .await;
    assert_eq!(r.value["created"], false);
    assert_eq!(
        std::fs::read_to_string(d.join("tmp/new/dir/report.md")).expect("read"),
        "line 1\nline 2\n"
    );
    // Replacing keeps no temporary files behind.
    call(
        &o,
        "write_file",
        json!({"path": "tmp/new/dir/report.md", "content": "fresh"}),
    )
    .await;
    let names: Vec<String> = std::fs::read_dir(d.join("tmp/new/dir"))
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert_eq!(names, ["report.md"]);
    // Outside the roots, through a symlink, into the vault or the data dir: refused, untouched.
    for (path, bad) in [
        ("outside.txt", "outside.txt"),
        ("tmp/link-out", "outside.txt"),
        ("tmp/config-dir/secrets.enc", "config/secrets.enc"),
        ("tmp/../config/secrets.enc", "config/secrets.enc"),
    ] {
        let before = std::fs::read(d.join(bad)).expect("read");
        let r = call(&o, "write_file", json!({"path": path, "content": "pwned"})).await;
        assert_ne!(r.status, Status::Ok, "{path}: {r:?}");
        assert_eq!(std::fs::read(d.join(bad)).expect("read"), before, "{path}");
    }
    let r = call(&o, "write_file", json!({"path": "tmp", "content": "x"})).await;
    assert_eq!(r.status, Status::Error, "a directory is not a file");
}

/// A writer inside a root flips `tmp/d` between a directory and a symlink to a directory
/// outside the roots while `read_file` and `write_file` run through the Invoker: no read
/// returns the outside file and no write lands outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_during_reads_and_writes_is_never_followed() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let o = overlay();
    let d = o.dir.path().to_path_buf();
    let outside = d.join("elsewhere");
    std::fs::create_dir_all(d.join("tmp/d")).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(d.join("tmp/d/f"), "inside").expect("w");
    std::fs::write(outside.join("f"), "OUTSIDE").expect("w");
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (d, outside, stop) = (d.clone(), outside.clone(), stop.clone());
        std::thread::spawn(move || {
            let (dir, real) = (d.join("tmp/d"), d.join("tmp/d.real"));
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if std::fs::rename(&dir, &real).is_ok() {
                    let _ = std::os::unix::fs::symlink(&outside, &dir);
                    std::thread::yield_now();
                    let _ = std::fs::remove_file(&dir);
                    let _ = std::fs::rename(&real, &dir);
                    flips += 1;
                    // A moment with the real directory in place, so reads also succeed on a
                    // loaded machine (CI once saw none in 1,500 with no pause).
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
            flips
        })
    };
    let mut ok_reads = 0;
    let mut i = 0;
    while i < 1500 || (ok_reads == 0 && i < 6000) {
        i += 1;
        let r = call(&o, "read_file", json!({"path": "tmp/d/f"})).await;
        if r.ok() {
            assert_eq!(r.value["content"], "inside", "a read escaped");
            ok_reads += 1;
        }
        let w = call(
            &o,
            "write_file",
            json!({"path": format!("tmp/d/w{}", i % 7), "content": "x"}),
        )
        .await;
        let _ = w;
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().expect("flipper");
    assert!(flips > 0 && ok_reads > 0, "flips {flips}, reads {ok_reads}");
    let escaped: Vec<_> = std::fs::read_dir(&outside)
        .expect("outside")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "f")
        .collect();
    assert!(escaped.is_empty(), "writes landed outside: {escaped:?}");
}

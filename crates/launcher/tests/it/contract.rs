//! The control API against an independent schema fuzzer: Schemathesis reads
//! `/api/openapi.json`, generates valid and invalid requests for every operation and checks
//! each answer against the document (status codes, content types, bodies, headers) with all
//! of its checks. Whatever it finds is a place where the server and its document disagree.

use std::process::Command;
use std::time::Duration;

use crate::common;

const OWNER: &str = "contract-owner-token-0123456789";
const EXECUTE_KEY: &str = "contract-execute-key-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_keeps_its_documented_contract_under_schemathesis() {
    let Some(schemathesis) =
        strata_test_support::program_on_path("schemathesis", "python3 -m pip install schemathesis")
    else {
        return;
    };
    // A provider that always answers, so `/chat` and `/execute` run real turns.
    let llm = strata_test_support::echo_llm(Duration::ZERO).await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    common::write(
        d,
        "config/config.yaml",
        &format!(
            "{}server:\n  execute_api_key: {EXECUTE_KEY}\n  tokens:\n    - {{name: fuzz, token: {OWNER}, tier: owner}}\n\
             agents:\n  main:\n    description: the one agent\n    tools: [current_time]\n",
            common::fake_llm(&llm, "sk-fake", "fake-model")
        ),
    );
    common::write(d, "agents/main/AGENTS.md", "You answer briefly.\n");
    let served = common::serve(d);
    let run = tokio::task::spawn_blocking({
        let base = served.base.clone();
        let scratch = d.to_path_buf();
        move || {
            Command::new(schemathesis)
                // Its cache (`.schemathesis/`) goes into the test's directory, not the source.
                .current_dir(scratch)
                .args([
                    "run",
                    &format!("{base}/api/openapi.json"),
                    "--checks",
                    "all",
                ])
                .args(["--header", &format!("Authorization: Bearer {OWNER}")])
                .args(["--header", &format!("X-API-Key: {EXECUTE_KEY}")])
                // Reproducible: the same requests on every run; enough of them to cover
                // every operation's parameters and bodies, valid and not. The event stream
                // never ends by itself: 5 s of it is its answer.
                .args(["--seed", "20261205", "--max-examples", "25"])
                .args(["--request-timeout", "5", "--no-color", "--workers", "2"])
                .env("SCHEMATHESIS_HOOKS", "")
                .output()
                .expect("run schemathesis")
        }
    })
    .await
    .expect("join");
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "schemathesis found disagreements between the server and /api/openapi.json:\n{report}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    drop(served);
}

//! Real commands in the real sandbox, once per backend this machine offers. A backend that
//! is missing here is skipped with a printed reason (CI installs bubblewrap; the kernel has
//! Landlock), never silently passed.

// Test code: a failed expectation should stop the test, with its message.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use strata_sandbox::{Backend, Limits, Mode, Outcome, Spec, probe, run};

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::new_in(&std::env::temp_dir())
    }
    fn new_in(base: &Path) -> Fixture {
        let dir = tempfile::tempdir_in(base).expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("config")).expect("config");
        std::fs::write(root.join("config/secrets.enc"), "VAULT-SECRET-0123").expect("vault");
        std::fs::create_dir_all(root.join("data")).expect("data");
        std::fs::write(root.join("data/sessions.db"), "DATA-SECRET-4567").expect("db");
        std::fs::create_dir_all(root.join("knowledge")).expect("kb");
        std::fs::write(root.join("knowledge/victim.txt"), "keep me").expect("victim");
        std::fs::write(root.join("outside.txt"), "keep me too").expect("outside");
        Fixture { dir }
    }
    fn root(&self) -> &Path {
        self.dir.path()
    }
    fn workspace(&self) -> PathBuf {
        self.root().join("tmp/workspaces/agent")
    }
    fn spec(&self, mode: Mode, command: &str) -> Spec {
        let mut read_roots: Vec<PathBuf> = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"]
            .iter()
            .map(PathBuf::from)
            .collect();
        read_roots.push(self.root().join("knowledge"));
        Spec {
            command: command.into(),
            workspace: self.workspace(),
            cwd: self.workspace(),
            read_roots,
            hidden: vec![self.root().join("config"), self.root().join("data")],
            network: false,
            env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
            timeout: Duration::from_secs(20),
            max_output: 4096,
            limits: Limits::default(),
            mode,
        }
    }
}

/// The backends to test here.
fn modes() -> Vec<Mode> {
    let p = probe();
    let mut v = Vec::new();
    // CI installs bubblewrap (.ci/run): there, a missing one is a failure, not a skip.
    assert!(
        p.bwrap.is_some() || std::env::var_os("CI").is_none(),
        "CI must have a working bubblewrap (apt-get install bubblewrap): {:?}",
        p.bwrap_problem
    );
    match &p.bwrap {
        Some(_) => v.push(Mode::Bubblewrap),
        None => strata_test_support::skipped(
            &format!(
                "the sandbox tests under bubblewrap ({})",
                p.bwrap_problem.as_deref().unwrap_or("not installed")
            ),
            "apt-get install bubblewrap",
        ),
    }
    match p.landlock_abi {
        Some(_) => v.push(Mode::Landlock),
        None => strata_test_support::skipped(
            "the sandbox tests under Landlock (not in this kernel)",
            "a kernel with Landlock (5.13 or later, enabled)",
        ),
    }
    v
}

async fn sh(f: &Fixture, mode: Mode, command: &str) -> Outcome {
    run(&f.spec(mode, command)).await.expect("run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspace_is_writable_and_the_output_is_captured() {
    for mode in modes() {
        let f = Fixture::new();
        let o = sh(
            &f,
            mode,
            "echo hello > note.txt && cat note.txt && echo oops >&2; exit 3",
        )
        .await;
        assert_eq!(o.exit_code, 3, "{mode:?}: {o:?}");
        assert_eq!(o.stdout, "hello\n");
        assert_eq!(o.stderr, "oops\n");
        assert_eq!(
            std::fs::read_to_string(f.workspace().join("note.txt")).expect("persisted"),
            "hello\n"
        );
        // Read roots are readable.
        let o = sh(
            &f,
            mode,
            &format!("cat {}", f.root().join("knowledge/victim.txt").display()),
        )
        .await;
        assert_eq!(
            (o.exit_code, o.stdout.as_str()),
            (0, "keep me"),
            "{mode:?}: {o:?}"
        );
        let expect = if mode == Mode::Bubblewrap {
            Backend::Bubblewrap
        } else {
            Backend::Landlock
        };
        assert_eq!(o.protections.backend, expect);
        assert!(o.protections.header().starts_with("[sandbox: "));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outside_the_workspace_fail_however_they_are_spelled() {
    for mode in modes() {
        let f = Fixture::new();
        let victim = f.root().join("knowledge/victim.txt");
        let outside = f.root().join("outside.txt");
        let v = victim.display();
        let o = outside.display();
        let attempts = [
            format!("/bin/rm -f {v} {o}"),
            format!("$(printf rm) -f {v} {o}"),
            format!("sh -c 'rm -f {v}; echo pwned > {o}'"),
            format!("printf 'rm -f {v}\\necho pwned > {o}\\n' > s.sh; sh ./s.sh"),
            format!(
                "ln -s {v} link && echo pwned > link; ln -s {} dir && echo new > dir/new.txt",
                f.root().display()
            ),
            format!("cp /bin/sh ./mysh && ./mysh -c 'echo pwned > {v}'"),
            format!("echo pwned | tee {v} {o} /etc/strata-pwned"),
            format!("mv {v} ./stolen.txt"),
        ];
        for cmd in &attempts {
            let out = sh(&f, mode, cmd).await;
            assert_eq!(
                std::fs::read_to_string(&victim).ok().as_deref(),
                Some("keep me"),
                "{mode:?} `{cmd}`: {out:?}"
            );
            assert_eq!(
                std::fs::read_to_string(&outside).ok().as_deref(),
                Some("keep me too"),
                "{mode:?} `{cmd}`: {out:?}"
            );
            assert!(!f.root().join("new.txt").exists(), "{mode:?} `{cmd}`");
            assert!(!Path::new("/etc/strata-pwned").exists(), "{mode:?} `{cmd}`");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vault_and_the_data_dir_cannot_be_read() {
    for mode in modes() {
        let f = Fixture::new();
        // Even with the whole overlay as a read root.
        let mut spec = f.spec(
            mode,
            &format!(
                "cat {0}/config/secrets.enc; cat {0}/data/sessions.db; cat ../../../config/secrets.enc; ls {0}/config",
                f.root().display()
            ),
        );
        spec.read_roots.push(f.root().to_path_buf());
        let o = run(&spec).await.expect("run");
        let all = format!("{}{}", o.stdout, o.stderr);
        assert!(
            !all.contains("VAULT-SECRET") && !all.contains("DATA-SECRET"),
            "{mode:?}: {o:?}"
        );
        assert!(!o.stdout.contains("secrets.enc"), "{mode:?}: {o:?}");
        if mode == Mode::Landlock {
            assert!(
                o.protections.notes.iter().any(|n| n.contains("dropped")),
                "{:?}",
                o.protections
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_is_off_unless_configured() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let a = accepted.clone();
    tokio::spawn(async move {
        while let Ok((_s, _)) = listener.accept().await {
            a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let cmd = format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED");
    for mode in modes() {
        let f = Fixture::new();
        let before = accepted.load(std::sync::atomic::Ordering::SeqCst);
        let o = sh(&f, mode, &cmd).await;
        assert!(!o.stdout.contains("CONNECTED"), "{mode:?}: {o:?}");
        assert_ne!(o.exit_code, 0);
        assert!(
            o.protections.network.starts_with("off"),
            "{:?}",
            o.protections
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            before,
            "{mode:?}: {o:?}"
        );

        let mut spec = f.spec(mode, &cmd);
        spec.network = true;
        let o = run(&spec).await.expect("run");
        assert!(
            o.stdout.contains("CONNECTED"),
            "{mode:?} with network on: {o:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        modes().len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_holds_only_what_is_passed() {
    for mode in modes() {
        let f = Fixture::new();
        let o = sh(&f, mode, "env | cut -d= -f1 | sort | tr '\\n' ' '").await;
        let keys: Vec<&str> = o
            .stdout
            .split_whitespace()
            .filter(|k| *k != "PWD" && *k != "SHLVL" && *k != "_")
            .collect();
        assert_eq!(keys, ["HOME", "PATH", "TMPDIR"], "{mode:?}: {o:?}");
    }
}

/// Processes whose command line contains `marker`.
fn survivors(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .map(|c| String::from_utf8_lossy(&c).contains(marker))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_whole_group_and_nothing_survives() {
    for (i, mode) in modes().into_iter().enumerate() {
        let f = Fixture::new();
        let marker = format!("98{i}.123");
        let escaper = format!("97{i}.321");
        let mut spec = f.spec(
            mode,
            &format!("sleep {marker} & (setsid sleep {escaper} &) ; nohup sleep {marker} >/dev/null 2>&1 & echo started; sleep {marker}"),
        );
        spec.timeout = Duration::from_secs(2);
        let o = run(&spec).await.expect("run");
        assert!(o.timed_out, "{mode:?}: {o:?}");
        assert_eq!(
            o.stdout, "started\n",
            "output captured before the kill is kept"
        );
        assert_ne!(o.exit_code, 0);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(survivors(&marker), 0, "{mode:?}: sleepers survived");
        // Even a process that left the session: the pid namespace (bubblewrap) or the pids
        // cgroup takes it. Without either, the result says it may survive.
        if mode == Mode::Bubblewrap || probe().cgroup.is_some() {
            assert_eq!(
                survivors(&escaper),
                0,
                "{mode:?}: the setsid sleeper survived"
            );
        } else {
            assert!(
                o.protections.notes.iter().any(|n| n.contains("outlive")),
                "{:?}",
                o.protections
            );
            kill_all_with(&escaper);
        }
        // Background work is not left behind after a normal exit either.
        let o = sh(&f, mode, &format!("sleep {marker}1 & echo bye")).await;
        assert!(!o.timed_out && o.exit_code == 0, "{mode:?}: {o:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(survivors(&format!("{marker}1")), 0, "{mode:?}");
    }
}

/// Kills what a test could not contain (processes whose command line holds `marker`).
fn kill_all_with(marker: &str) {
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let hit = std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(marker))
            .unwrap_or(false);
        if hit && let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_output_is_capped_and_stopped() {
    for mode in modes() {
        let f = Fixture::new();
        let o = sh(&f, mode, "yes; echo unreachable").await;
        assert_eq!(o.stdout.len(), 4096, "{mode:?}");
        assert!(
            o.stdout_truncated && o.flooded && !o.timed_out,
            "{mode:?}: {:?}",
            (o.stdout_truncated, o.flooded, o.timed_out)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_is_contained() {
    let p = probe();
    if p.cgroup.is_none() && p.root {
        strata_test_support::skipped(
            "the fork-bomb test (root without a writable pids cgroup has no process limit)",
            "run as a user, or with a writable cgroup v2 pids controller",
        );
        return;
    }
    for mode in modes() {
        let f = Fixture::new();
        let marker = format!("bomb-{}", std::process::id());
        std::fs::create_dir_all(f.workspace()).expect("ws");
        std::fs::write(
            f.workspace().join(format!("{marker}.sh")),
            "b() { b | b & }; b; sleep 30\n",
        )
        .expect("script");
        let mut spec = f.spec(mode, &format!("sh ./{marker}.sh"));
        spec.timeout = Duration::from_secs(3);
        spec.limits = Limits {
            max_processes: 64,
            ..Limits::default()
        };
        let o = run(&spec).await.expect("run");
        assert!(
            o.protections.processes.starts_with("at most 64"),
            "{:?}",
            o.protections
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(survivors(&marker), 0, "{mode:?}: bomb processes survived");
        // The machine still forks.
        let o = sh(&f, mode, "echo alive").await;
        assert_eq!(o.stdout, "alive\n", "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_are_refused() {
    let f = Fixture::new();
    let mut spec = f.spec(Mode::None, "true");
    spec.cwd = f.root().to_path_buf();
    assert!(
        run(&spec)
            .await
            .expect_err("refused")
            .to_string()
            .contains("inside the workspace")
    );
    let mut spec = f.spec(Mode::None, "true");
    spec.hidden.push(f.root().join("tmp"));
    assert!(
        run(&spec)
            .await
            .expect_err("refused")
            .to_string()
            .contains("overlap")
    );
    let mut spec = f.spec(Mode::None, "true");
    spec.workspace = "relative".into();
    assert!(
        run(&spec)
            .await
            .expect_err("refused")
            .to_string()
            .contains("absolute")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jailed_program_is_nobody_sees_no_hidden_path_and_writes_only_where_allowed() {
    if !modes().contains(&Mode::Bubblewrap) {
        return;
    }
    // Outside /tmp, which the jail replaces with its own (CI's checkout is under /tmp).
    let f = Fixture::new_in(&outside_tmp());
    let writable = f.root().join("profile");
    std::fs::create_dir_all(&writable).expect("profile");
    let jail = strata_sandbox::host::Jail {
        writable: vec![writable.clone()],
        hidden: vec![f.root().join("data"), f.root().join("config/secrets.enc")],
    };
    let script = format!(
        "id -u; cat {data}/sessions.db; echo; cat {vault}; echo; \
         echo made > {w}/made.txt && echo wrote-profile; \
         echo no > {outside} 2>/dev/null && echo wrote-outside; \
         cat /proc/self/status | grep CapEff",
        data = f.root().join("data").display(),
        vault = f.root().join("config/secrets.enc").display(),
        w = writable.display(),
        outside = f.root().join("outside.txt").display(),
    );
    let mut cmd = strata_sandbox::host::jailed(Path::new("/bin/sh"), &jail, &[])
        .expect("bubblewrap runs here");
    cmd.args(["-c", &script]);
    let out = strata_sandbox::host::output(cmd, None, Duration::from_secs(20), 64 * 1024)
        .await
        .expect("run");
    let text = out.stdout;
    assert!(
        out.status.is_some_and(|s| s.success()),
        "{text} / {}",
        out.stderr
    );
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("65534"), "runs as nobody: {text}");
    assert!(
        !text.contains("DATA-SECRET"),
        "the data dir is hidden: {text}"
    );
    assert!(
        !text.contains("VAULT-SECRET"),
        "the vault is hidden: {text}"
    );
    assert!(text.contains("wrote-profile"), "{text}");
    assert!(!text.contains("wrote-outside"), "{text}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert_eq!(
        std::fs::read_to_string(writable.join("made.txt")).expect("made"),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.root().join("outside.txt")).expect("outside"),
        "keep me too"
    );
}

/// A writable directory not under `/tmp`: `/var/tmp` (Debian has it), else the target dir's.
fn outside_tmp() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let var_tmp = PathBuf::from("/var/tmp");
    let dir = if var_tmp.is_dir() { var_tmp } else { target };
    assert!(
        !dir.starts_with("/tmp"),
        "no writable directory outside /tmp to test the jail with ({})",
        dir.display()
    );
    dir
}

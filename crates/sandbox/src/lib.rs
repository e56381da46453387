//! Runs one shell command (`/bin/sh -c`) in isolation that does not depend on guessing bad
//! command strings.
//!
//! Two backends, chosen by [`Mode`] (`Auto` picks the first that works here):
//!
//! - **bubblewrap** (`bwrap` on PATH and able to create namespaces): a fresh mount namespace
//!   with only the read roots bound read-only, the workspace bound read-write, a private
//!   `/tmp`, a fresh `/proc` and `/dev`, the protected directories hidden under empty tmpfs
//!   mounts; new user, pid, ipc, uts, cgroup and (unless network is on) network namespaces;
//!   all capabilities dropped; killed with its parent.
//! - **Landlock** (kernel ABI ≥ 1): applied to the child between fork and exec — reads and
//!   execution only under the read roots, writes only under the workspace (whose `.tmp` is the
//!   command's `TMPDIR`), TCP connect/bind denied when network is off (ABI ≥ 4) and a network
//!   namespace when the kernel lets us make one, signals and abstract sockets scoped to the
//!   sandbox (ABI ≥ 6), `no_new_privs`.
//!
//! Both: a cleared environment with only what the caller passes, rlimits (CPU time, address
//! space, file size, open files, no core dumps), a pids cgroup when one can be made (else
//! `RLIMIT_NPROC`, which does not bind root), a new session whose whole process group — and
//! every process of the cgroup — is killed on timeout, on output flood and after the command
//! ends. Output is captured up to a cap per stream. [`Protections`] says what was active.

mod cgroup;
mod child;
pub mod host;
#[cfg(target_os = "linux")]
mod landlock_rules;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;

/// Which isolation to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// bubblewrap if it works here, else Landlock, else refuse.
    Auto,
    /// bubblewrap or refuse.
    Bubblewrap,
    /// Landlock or refuse.
    Landlock,
    /// No filesystem or network isolation (rlimits, cleared environment and process-group
    /// kill still apply). Only when configured explicitly.
    None,
}

/// Resource limits of the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// CPU seconds per process.
    pub cpu_secs: u64,
    /// Address space per process, bytes.
    pub address_space: u64,
    /// Processes (and threads) of the sandbox at once.
    pub max_processes: u64,
    /// Largest file a process may write, bytes.
    pub file_size: u64,
    /// Open file descriptors per process.
    pub open_files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cpu_secs: 120,
            address_space: 4 << 30,
            max_processes: 256,
            file_size: 1 << 30,
            open_files: 1024,
        }
    }
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Given to `/bin/sh -c`.
    pub command: String,
    /// Absolute; created when missing; the only place writes persist.
    pub workspace: PathBuf,
    /// Absolute; inside the workspace.
    pub cwd: PathBuf,
    /// Absolute directories readable (and executable) inside the sandbox.
    pub read_roots: Vec<PathBuf>,
    /// Absolute directories that must stay unreadable (the overlay's `config/`, the data dir).
    /// A read root that contains one is dropped under Landlock (it cannot carve holes).
    pub hidden: Vec<PathBuf>,
    /// Network access.
    pub network: bool,
    /// The whole environment of the command (`HOME` and `TMPDIR` are set on top).
    pub env: Vec<(String, String)>,
    /// Wall-clock limit; the process group is killed when it passes.
    pub timeout: Duration,
    /// Bytes kept of stdout and of stderr each.
    pub max_output: usize,
    /// Resource limits.
    pub limits: Limits,
    /// Backend choice.
    pub mode: Mode,
}

/// The backend that ran a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// bubblewrap namespaces.
    Bubblewrap,
    /// Landlock ruleset.
    Landlock,
    /// Nothing but rlimits, environment and group kill.
    None,
}

impl Backend {
    /// `bubblewrap`, `landlock` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Bubblewrap => "bubblewrap",
            Backend::Landlock => "landlock",
            Backend::None => "none",
        }
    }
}

/// What protected a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protections {
    /// The backend.
    pub backend: Backend,
    /// Filesystem isolation, in words.
    pub filesystem: String,
    /// Network isolation, in words.
    pub network: String,
    /// Process-count containment, in words.
    pub processes: String,
    /// Other notes (dropped read roots, missing kernel features).
    pub notes: Vec<String>,
}

impl Protections {
    /// One bracketed line for a tool result's header.
    pub fn header(&self) -> String {
        let mut s = format!(
            "[sandbox: {}; filesystem: {}; network: {}; processes: {}; environment: allow-listed; no_new_privs, rlimits, own process group",
            self.backend.as_str(),
            self.filesystem,
            self.network,
            self.processes
        );
        for n in &self.notes {
            s.push_str("; ");
            s.push_str(n);
        }
        s.push(']');
        s
    }
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The exit code; 128 + signal when killed by a signal.
    pub exit_code: i32,
    /// Standard output (lossy UTF-8), at most `max_output` bytes of it.
    pub stdout: String,
    /// Standard error likewise.
    pub stderr: String,
    /// More stdout was produced than kept.
    pub stdout_truncated: bool,
    /// More stderr was produced than kept.
    pub stderr_truncated: bool,
    /// The timeout passed and the group was killed.
    pub timed_out: bool,
    /// Output kept flowing far past the cap and the group was killed.
    pub flooded: bool,
    /// What protected the run.
    pub protections: Protections,
}

/// Why a command did not run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The requested isolation is not available here.
    #[error("{0}")]
    Unavailable(String),
    /// The spec is inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// Starting or watching the process failed.
    #[error("could not run the command: {0}")]
    Io(#[from] std::io::Error),
}

/// What this machine offers; found once per process.
#[derive(Debug, Clone)]
pub struct Probe {
    /// `bwrap`, when it is on PATH and could create its namespaces.
    pub bwrap: Option<PathBuf>,
    /// Why bubblewrap is not usable, when it is not.
    pub bwrap_problem: Option<String>,
    /// The kernel's Landlock ABI.
    pub landlock_abi: Option<u32>,
    /// `unshare` flags that give the Landlock path a network namespace (0: none works).
    pub netns_flags: i32,
    /// A pids cgroup parent directory we may create children in.
    pub cgroup: Option<PathBuf>,
    /// Running as root (RLIMIT_NPROC does not bind root).
    pub root: bool,
}

impl Probe {
    /// Lines for `strata doctor`.
    pub fn report(&self) -> Vec<String> {
        let mut v = Vec::new();
        match (&self.bwrap, &self.bwrap_problem) {
            (Some(p), _) => v.push(format!("bubblewrap: {} works (preferred)", p.display())),
            (None, Some(why)) => v.push(format!("bubblewrap: not usable ({why})")),
            (None, None) => {
                v.push("bubblewrap: not installed (Debian: apt-get install bubblewrap)".into())
            }
        }
        match self.landlock_abi {
            Some(abi) => v.push(format!(
                "landlock: ABI {abi}{}{}",
                if abi >= 4 {
                    ", TCP filtering"
                } else {
                    ", no TCP filtering (ABI < 4)"
                },
                if abi >= 6 { ", signal scoping" } else { "" }
            )),
            None => v.push("landlock: not available in this kernel".into()),
        }
        v.push(if self.netns_flags != 0 {
            "network namespace: available".into()
        } else {
            "network namespace: not available to this user (Landlock path blocks TCP only)".into()
        });
        v.push(match (&self.cgroup, self.root) {
            (Some(p), _) => format!("process limit: pids cgroup under {}", p.display()),
            (None, false) => "process limit: RLIMIT_NPROC (no writable pids cgroup)".into(),
            (None, true) => {
                "process limit: none (root without a writable pids cgroup; RLIMIT_NPROC does not bind root)".into()
            }
        });
        v
    }

    /// The backend `mode` resolves to here, or why none does.
    pub fn choose(&self, mode: Mode) -> Result<Backend, SandboxError> {
        let bwrap = self.bwrap.is_some();
        let ll = self.landlock_abi.is_some();
        match mode {
            Mode::None => Ok(Backend::None),
            Mode::Bubblewrap if bwrap => Ok(Backend::Bubblewrap),
            Mode::Landlock if ll => Ok(Backend::Landlock),
            Mode::Auto if bwrap => Ok(Backend::Bubblewrap),
            Mode::Auto if ll => Ok(Backend::Landlock),
            _ => Err(SandboxError::Unavailable(format!(
                "no sandbox is available for mode {mode:?} ({}); install bubblewrap, or set `tools.terminal.sandbox: none` to run unisolated",
                self.report().join("; ")
            ))),
        }
    }
}

/// Probes the machine (once; later calls return the same answer).
pub fn probe() -> &'static Probe {
    static PROBE: OnceLock<Probe> = OnceLock::new();
    PROBE.get_or_init(|| {
        let (bwrap, bwrap_problem) = probe_bwrap();
        let landlock_abi = child::landlock_abi();
        Probe {
            bwrap,
            bwrap_problem,
            landlock_abi,
            netns_flags: probe_netns(),
            cgroup: cgroup::probe(),
            root: child::is_root(),
        }
    })
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn probe_bwrap() -> (Option<PathBuf>, Option<String>) {
    let Some(bin) = find_on_path("bwrap") else {
        return (None, None);
    };
    let out = std::process::Command::new(&bin)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--",
            "/bin/true",
        ])
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => (Some(bin), None),
        Ok(o) => (
            None,
            Some(format!(
                "{} cannot create namespaces here: {}",
                bin.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
        ),
        Err(e) => (None, Some(format!("{}: {e}", bin.display()))),
    }
}

/// Which `unshare` flags give a child a network namespace: plain when privileged, with a
/// user namespace when not; 0 when neither works.
fn probe_netns() -> i32 {
    for flags in [libc::CLONE_NEWNET, libc::CLONE_NEWUSER | libc::CLONE_NEWNET] {
        let mut cmd = std::process::Command::new("/bin/true");
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        child::ChildSetup {
            unshare: flags,
            ..Default::default()
        }
        .install_std(&mut cmd);
        if cmd.status().is_ok_and(|s| s.success()) {
            return flags;
        }
    }
    0
}

fn inside(p: &Path, root: &Path) -> bool {
    p.starts_with(root)
}

/// Runs `spec`.
pub async fn run(spec: &Spec) -> Result<Outcome, SandboxError> {
    let probe = tokio::task::spawn_blocking(probe)
        .await
        .map_err(|e| SandboxError::Unavailable(format!("probe failed: {e}")))?;
    let backend = probe.choose(spec.mode)?;
    for (what, p) in [("workspace", &spec.workspace), ("cwd", &spec.cwd)] {
        if !p.is_absolute() {
            return Err(SandboxError::Invalid(format!("{what} must be absolute")));
        }
    }
    if !inside(&spec.cwd, &spec.workspace) {
        return Err(SandboxError::Invalid(
            "cwd must be inside the workspace".into(),
        ));
    }
    if let Some(h) = spec
        .hidden
        .iter()
        .find(|h| inside(&spec.workspace, h) || inside(h, &spec.workspace))
    {
        return Err(SandboxError::Invalid(format!(
            "the workspace and the protected directory {} overlap",
            h.display()
        )));
    }
    let tmp = spec.workspace.join(".tmp");
    std::fs::create_dir_all(&tmp)?;
    std::fs::create_dir_all(&spec.cwd)?;
    let workspace = spec.workspace.canonicalize()?;
    let cwd = spec.cwd.canonicalize()?;
    let hidden: Vec<PathBuf> = spec
        .hidden
        .iter()
        .map(|h| h.canonicalize().unwrap_or_else(|_| h.clone()))
        .collect();

    let mut notes = Vec::new();
    let mut setup = child::ChildSetup {
        setsid: true,
        cpu_secs: Some(spec.limits.cpu_secs.max(1)),
        address_space: Some(spec.limits.address_space),
        file_size: Some(spec.limits.file_size),
        open_files: Some(spec.limits.open_files),
        no_new_privs: true,
        ..Default::default()
    };
    let group = match &probe.cgroup {
        Some(parent) => match cgroup::Group::create(parent, spec.limits.max_processes) {
            Ok(g) => Some(g),
            Err(e) => {
                notes.push(format!("pids cgroup failed ({e})"));
                None
            }
        },
        None => None,
    };
    let processes = match &group {
        Some(g) => {
            setup.cgroup_procs_fd = Some(g.procs_fd());
            format!("at most {} (pids cgroup)", spec.limits.max_processes)
        }
        None if !probe.root => {
            setup.nproc = Some(spec.limits.max_processes);
            format!("at most {} (RLIMIT_NPROC)", spec.limits.max_processes)
        }
        None => "unlimited (root without a pids cgroup)".into(),
    };

    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .filter(|(k, _)| k != "HOME" && k != "TMPDIR")
        .cloned()
        .collect();
    env.push(("HOME".into(), workspace.display().to_string()));

    // Kept alive until the child has been spawned (its descriptor is used after fork).
    #[cfg(target_os = "linux")]
    let mut _ruleset: Option<std::os::fd::OwnedFd> = None;
    let (mut cmd, filesystem, network) = match backend {
        Backend::Bubblewrap => {
            let bin = probe.bwrap.clone().unwrap_or_else(|| "bwrap".into());
            let mut cmd = tokio::process::Command::new(bin);
            cmd.args(["--die-with-parent", "--new-session", "--unshare-all"]);
            if spec.network {
                cmd.arg("--share-net");
            }
            cmd.args(["--cap-drop", "ALL"]);
            // Order matters: later mounts go on top of earlier ones.
            cmd.args(["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
            for r in &spec.read_roots {
                cmd.arg("--ro-bind-try").arg(r).arg(r);
            }
            cmd.arg("--bind").arg(&workspace).arg(&workspace);
            for h in &hidden {
                let reachable = spec.read_roots.iter().any(|r| inside(h, r));
                if reachable && h.is_dir() {
                    cmd.arg("--tmpfs").arg(h);
                } else if reachable {
                    cmd.arg("--ro-bind").arg("/dev/null").arg(h);
                }
            }
            cmd.arg("--chdir").arg(&cwd);
            cmd.args(["--", "/bin/sh", "-c", &spec.command]);
            env.push(("TMPDIR".into(), "/tmp".into()));
            (
                cmd,
                "workspace read-write, read roots read-only, private /tmp, protected dirs hidden"
                    .to_owned(),
                if spec.network {
                    "on".to_owned()
                } else {
                    "off (network namespace)".to_owned()
                },
            )
        }
        Backend::Landlock => {
            #[cfg(target_os = "linux")]
            {
                let mut roots = Vec::new();
                for r in &spec.read_roots {
                    let rc = r.canonicalize().unwrap_or_else(|_| r.clone());
                    if let Some(h) = hidden.iter().find(|h| inside(h, &rc)) {
                        notes.push(format!(
                            "read root {} dropped (it contains the protected {})",
                            r.display(),
                            h.display()
                        ));
                        continue;
                    }
                    roots.push(rc);
                }
                let abi = probe.landlock_abi.unwrap_or(0);
                let fd =
                    landlock_rules::ruleset(&roots, std::slice::from_ref(&workspace), spec.network)
                        .map_err(SandboxError::Unavailable)?;
                setup.landlock_fd = Some(std::os::fd::AsRawFd::as_raw_fd(&fd));
                _ruleset = Some(fd);
                let network = if spec.network {
                    "on".to_owned()
                } else {
                    let mut n = Vec::new();
                    if probe.netns_flags != 0 {
                        setup.unshare = probe.netns_flags;
                        n.push("network namespace");
                    }
                    if abi >= 4 {
                        n.push("landlock TCP deny");
                    }
                    if n.is_empty() {
                        notes.push("network could not be turned off (no network namespace, Landlock ABI < 4)".into());
                        "on (not isolatable here)".to_owned()
                    } else {
                        format!("off ({})", n.join(" + "))
                    }
                };
                let mut cmd = tokio::process::Command::new("/bin/sh");
                cmd.arg("-c").arg(&spec.command).current_dir(&cwd);
                env.push(("TMPDIR".into(), tmp.display().to_string()));
                (
                    cmd,
                    format!(
                        "landlock ABI {abi}: writes only in the workspace (TMPDIR is its .tmp), reads only under the read roots"
                    ),
                    network,
                )
            }
            #[cfg(not(target_os = "linux"))]
            {
                return Err(SandboxError::Unavailable("Landlock needs Linux".into()));
            }
        }
        Backend::None => {
            let mut cmd = tokio::process::Command::new("/bin/sh");
            cmd.arg("-c").arg(&spec.command).current_dir(&cwd);
            env.push(("TMPDIR".into(), tmp.display().to_string()));
            notes.push("no filesystem or network isolation (tools.terminal.sandbox: none)".into());
            (
                cmd,
                "not isolated".to_owned(),
                "on (not isolated)".to_owned(),
            )
        }
    };
    let processes = match backend {
        Backend::Bubblewrap => format!("{processes}, own pid namespace"),
        _ if group.is_none() => {
            notes.push(
                "without a pids cgroup a process that starts its own session can outlive the command"
                    .into(),
            );
            processes
        }
        _ => processes,
    };
    cmd.env_clear()
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    setup.install(&mut cmd);
    let mut child = cmd.spawn()?;
    #[cfg(target_os = "linux")]
    drop(_ruleset.take());
    let pgid = child.id();
    let flood = std::sync::Arc::new(tokio::sync::Notify::new());
    let hard = spec.max_output.saturating_mul(64).max(8 << 20);
    let start = |r: Option<_>| {
        r.map(|r| {
            let shared = Shared::default();
            let h = tokio::spawn(drain(
                r,
                spec.max_output,
                hard,
                flood.clone(),
                shared.clone(),
            ));
            (h, shared)
        })
    };
    let out = start(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
    );
    let err = start(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
    );

    let mut timed_out = false;
    let mut flooded = false;
    let status = tokio::select! {
        s = child.wait() => Some(s?),
        _ = tokio::time::sleep(spec.timeout) => { timed_out = true; None }
        _ = flood.notified() => { flooded = true; None }
    };
    // Killing waits for the cgroup to empty (short sleeps): off the async workers.
    let group = std::sync::Arc::new(group);
    let g = group.clone();
    let _ = tokio::task::spawn_blocking(move || kill_all(pgid, g.as_ref().as_ref())).await;
    let status = match status {
        Some(s) => s,
        None => child.wait().await?,
    };
    // Pipes close when the last holder dies; bound the wait in case one escaped the group.
    let (stdout, stdout_truncated) = collect(out, spec.max_output).await;
    let (stderr, stderr_truncated) = collect(err, spec.max_output).await;
    if let Some(g) = std::sync::Arc::into_inner(group).flatten() {
        let _ = tokio::task::spawn_blocking(move || g.remove()).await;
    }
    let exit_code = match status.code() {
        Some(c) => c,
        None => {
            use std::os::unix::process::ExitStatusExt;
            128 + status.signal().unwrap_or(9)
        }
    };
    Ok(Outcome {
        exit_code,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        timed_out,
        flooded,
        protections: Protections {
            backend,
            filesystem,
            network,
            processes,
            notes,
        },
    })
}

/// Kills the command's process group and every process left in its cgroup.
fn kill_all(pgid: Option<u32>, group: Option<&cgroup::Group>) {
    if let Some(pid) = pgid.and_then(|p| i32::try_from(p).ok())
        && let Some(pid) = rustix_pid(pid)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    if let Some(g) = group {
        g.kill_all();
    }
}

fn rustix_pid(pid: i32) -> Option<rustix::process::Pid> {
    rustix::process::Pid::from_raw(pid)
}

/// What a drain has read so far: kept bytes and the total seen.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    total: usize,
}

type Shared = std::sync::Arc<std::sync::Mutex<Captured>>;

async fn drain<R: tokio::io::AsyncRead + Unpin>(
    mut r: R,
    cap: usize,
    hard: usize,
    flood: std::sync::Arc<tokio::sync::Notify>,
    into: Shared,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let signalled = AtomicBool::new(false);
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let total = {
                    let mut c = into.lock().unwrap_or_else(|p| p.into_inner());
                    c.total = c.total.saturating_add(n);
                    if c.kept.len() < cap {
                        let take = n.min(cap - c.kept.len());
                        c.kept.extend_from_slice(&buf[..take]);
                    }
                    c.total
                };
                if total > hard && !signalled.swap(true, Ordering::Relaxed) {
                    flood.notify_one();
                }
            }
        }
    }
}

/// Waits (bounded: a process that escaped the group may hold the pipe open) for a drain to
/// finish and returns what it captured, finished or not.
async fn collect(h: Option<(tokio::task::JoinHandle<()>, Shared)>, cap: usize) -> (String, bool) {
    let Some((mut h, shared)) = h else {
        return (String::new(), false);
    };
    if tokio::time::timeout(Duration::from_secs(2), &mut h)
        .await
        .is_err()
    {
        h.abort();
    }
    let c = shared.lock().unwrap_or_else(|p| p.into_inner());
    (String::from_utf8_lossy(&c.kept).into_owned(), c.total > cap)
}

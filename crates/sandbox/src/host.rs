//! Children we start *outside* the sandbox — a provider CLI, an MCP server over stdio, a
//! token command, an external agent: programs the operator configured, which need their own
//! access. They still get the same confinement of their environment and lifetime, from one
//! place: a cleared environment holding only [`BASE_ENV`] and what their config allows, their
//! own process group, killed with the group when dropped, at a deadline, and after they end
//! (so nothing they started lingers), and capped output.

use std::ffi::OsStr;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Variables every such child gets from this process's environment, when set.
pub const BASE_ENV: [&str; 8] = [
    "PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "TERM", "TMPDIR",
];

/// A command for `program` with a cleared environment holding [`BASE_ENV`] and the `allow`ed
/// variables of this process, its own process group, killed when dropped. Add arguments,
/// working directory, explicit variables (secrets resolved from the vault) and stdio as usual.
pub fn command(program: impl AsRef<OsStr>, allow: &[String]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.env_clear().kill_on_drop(true).process_group(0);
    for k in BASE_ENV
        .iter()
        .copied()
        .chain(allow.iter().map(String::as_str))
    {
        if let Ok(v) = std::env::var(k) {
            cmd.env(k, v);
        }
    }
    cmd
}

/// Kills the process group a child made with [`command`] leads (its pid is the group id).
pub fn kill_group(pid: Option<u32>) {
    if let Some(p) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
    }
}

/// What [`output`] collected.
#[derive(Debug)]
pub struct Output {
    /// Exit status; `None` when the deadline passed and the group was killed.
    pub status: Option<ExitStatus>,
    /// Standard output, at most the cap (lossy UTF-8).
    pub stdout: String,
    /// Whether standard output went past the cap.
    pub stdout_truncated: bool,
    /// Standard error, at most the cap (lossy UTF-8).
    pub stderr: String,
}

/// Reads `r` to its end, keeping at most `cap` bytes (the rest is drained so the child never
/// blocks on a full pipe); returns the text and whether it was cut.
pub async fn read_capped<R: AsyncRead + Unpin>(mut r: R, cap: usize) -> (String, bool) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut more = false;
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                more |= n > room;
            }
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), more)
}

/// Runs `cmd` (from [`command`]) to its end or `timeout`, with `stdin` written to it (or
/// none), standard output and error capped at `cap` bytes each. The process group is killed
/// at the deadline and after the child ends.
pub async fn output(
    mut cmd: tokio::process::Command,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    cap: usize,
) -> std::io::Result<Output> {
    use tokio::io::AsyncWriteExt;
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        tokio::spawn(async move {
            let _ = pipe.write_all(&input).await;
        });
    }
    let out = child
        .stdout
        .take()
        .map(|r| tokio::spawn(read_capped(r, cap)));
    let err = child
        .stderr
        .take()
        .map(|r| tokio::spawn(read_capped(r, cap)));
    let pid = child.id();
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(s) => Some(s?),
        Err(_) => None,
    };
    kill_group(pid);
    let _ = child.wait().await;
    // Pipes held open by a grandchild that escaped the group must not hang us.
    let join = |h: Option<tokio::task::JoinHandle<(String, bool)>>| async move {
        match h {
            Some(h) => tokio::time::timeout(Duration::from_secs(2), h)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => Default::default(),
        }
    };
    let (stdout, stdout_truncated) = join(out).await;
    let (stderr, _) = join(err).await;
    Ok(Output {
        status,
        stdout,
        stdout_truncated,
        stderr,
    })
}

/// What a jailed program may see of the file system besides a read-only view of the machine.
#[derive(Debug, Clone, Default)]
pub struct Jail {
    /// Directories it may write (bound read-write, on top of everything else).
    pub writable: Vec<std::path::PathBuf>,
    /// Directories and files it must not see: an empty directory or `/dev/null` in their place.
    pub hidden: Vec<std::path::PathBuf>,
}

/// The unprivileged user a jailed program runs as inside its user namespace (`nobody`).
pub const JAIL_UID: u32 = 65534;

/// `program` confined by bubblewrap, for a program that runs *beside* the sandbox proper
/// because it needs the loopback network (a headless browser driven over its DevTools port):
/// its own user namespace in which it is the unprivileged [`JAIL_UID`] with no capabilities
/// (so a program that refuses its own sandbox as root keeps it), its own pid, IPC and UTS
/// namespaces, the machine read-only with a private `/tmp`, `/dev` and `/proc`, the
/// [`Jail::hidden`] paths replaced by empty ones and only [`Jail::writable`] writable; killed
/// with its parent. The environment is [`command`]'s. `None` when bubblewrap cannot run here
/// (`probe().bwrap_problem` says why).
pub fn jailed(
    program: &std::path::Path,
    jail: &Jail,
    allow: &[String],
) -> Option<tokio::process::Command> {
    let bwrap = crate::probe().bwrap.clone()?;
    let mut cmd = command(bwrap, allow);
    let uid = JAIL_UID.to_string();
    cmd.args(["--die-with-parent", "--new-session"])
        .args(["--unshare-user", "--uid", &uid, "--gid", &uid])
        .args(["--unshare-pid", "--unshare-ipc", "--unshare-uts"])
        .args(["--unshare-cgroup-try", "--cap-drop", "ALL"])
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
        .args(["--tmpfs", "/tmp"]);
    // Later mounts go on top of earlier ones: hide first, then open what it may write.
    for h in &jail.hidden {
        if h.is_dir() {
            cmd.arg("--tmpfs").arg(h);
        } else if h.exists() {
            cmd.arg("--ro-bind").arg("/dev/null").arg(h);
        }
    }
    for w in &jail.writable {
        cmd.arg("--bind").arg(w).arg(w);
    }
    cmd.arg("--").arg(program);
    Some(cmd)
}

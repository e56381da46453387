//! The only unsafe code of the workspace: system calls made in the child between `fork` and
//! `exec`, and two probes of the kernel.
//!
//! Everything the child does is decided and allocated in the parent before the fork (rlimit
//! values, the cgroup `cgroup.procs` descriptor, the Landlock ruleset descriptor, unshare
//! flags); the hook itself only makes raw system calls on those values. That keeps it
//! async-signal-safe in a multi-threaded parent, which is why no re-exec'd helper binary is
//! needed for the Landlock path.
#![allow(unsafe_code)]

use std::io;

/// What the child applies to itself before `exec`, in this order.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ChildSetup {
    /// A new session (and so a new process group whose id is the child's pid).
    pub setsid: bool,
    /// `cgroup.procs` of a pids cgroup, opened by the parent; the child writes itself there.
    pub cgroup_procs_fd: Option<i32>,
    /// `RLIMIT_CPU` seconds.
    pub cpu_secs: Option<u64>,
    /// `RLIMIT_AS` bytes.
    pub address_space: Option<u64>,
    /// `RLIMIT_NPROC`.
    pub nproc: Option<u64>,
    /// `RLIMIT_FSIZE` bytes.
    pub file_size: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `unshare(2)` flags (0: none).
    pub unshare: i32,
    /// `PR_SET_NO_NEW_PRIVS`.
    pub no_new_privs: bool,
    /// A Landlock ruleset to restrict the child with (needs `no_new_privs` or CAP_SYS_ADMIN).
    pub landlock_fd: Option<i32>,
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl ChildSetup {
    /// Runs in the child after `fork`: raw system calls only (no allocation, no locks).
    fn apply(&self) -> io::Result<()> {
        // SAFETY (all blocks below): plain system calls on integers and on pointers to
        // stack values that outlive the call; nothing here allocates or takes a lock.
        if self.setsid {
            check(unsafe { libc::setsid() })?;
        }
        if let Some(fd) = self.cgroup_procs_fd {
            // "0" moves the writing process itself (cgroup v1 and v2).
            let r = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            if r != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        let limits = [
            (libc::RLIMIT_CPU, self.cpu_secs),
            (libc::RLIMIT_AS, self.address_space),
            (libc::RLIMIT_NPROC, self.nproc),
            (libc::RLIMIT_FSIZE, self.file_size),
            (libc::RLIMIT_NOFILE, self.open_files),
            (libc::RLIMIT_CORE, Some(0)),
        ];
        for (res, v) in limits {
            if let Some(v) = v {
                let lim = libc::rlimit {
                    rlim_cur: v as libc::rlim_t,
                    rlim_max: v as libc::rlim_t,
                };
                check(unsafe { libc::setrlimit(res, &lim) })?;
            }
        }
        if self.unshare != 0 {
            check(unsafe { libc::unshare(self.unshare) })?;
        }
        if self.no_new_privs {
            check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        }
        if let Some(fd) = self.landlock_fd {
            let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
            unsafe { libc::close(fd) };
        }
        Ok(())
    }

    /// Installs the hook on `cmd`.
    pub(crate) fn install(self, cmd: &mut tokio::process::Command) {
        // SAFETY: `apply` is async-signal-safe (see above) and reads only `self`, a `Copy`
        // value moved into the closure.
        unsafe {
            cmd.pre_exec(move || self.apply());
        }
    }
}

impl ChildSetup {
    /// Installs the hook on a std `cmd` (the probes, which run outside any runtime).
    pub(crate) fn install_std(self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: as for `install`.
        unsafe {
            cmd.pre_exec(move || self.apply());
        }
    }
}

/// The kernel's Landlock ABI version, or `None` when Landlock is unavailable.
pub(crate) fn landlock_abi() -> Option<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: the documented version query: null attributes, size 0, the VERSION flag.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(r).ok().filter(|v| *v > 0)
}

/// Whether this process runs as root (which RLIMIT_NPROC does not bind).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

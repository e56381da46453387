//! A pids cgroup per run, when this process may make one: caps the number of processes (a
//! fork bomb) and lets every process of the run be found and killed, even one that left the
//! process group.

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The directory under which run cgroups can be created, if any (v2 with the pids
/// controller, or the v1 pids hierarchy), checked by making and removing one.
pub(crate) fn probe() -> Option<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut candidates = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "pids") {
            candidates.push(Path::new("/sys/fs/cgroup/pids").join(path));
        } else if controllers.is_empty() {
            for base in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
                let b = Path::new(base);
                if fs::read_to_string(b.join("cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|x| x == "pids"))
                {
                    candidates.push(b.join(path));
                }
            }
        }
    }
    candidates.into_iter().find(|parent| {
        let test = parent.join(format!("strata-probe-{}", uuid::Uuid::new_v4().simple()));
        let ok = fs::create_dir(&test).is_ok() && test.join("pids.max").exists();
        let _ = fs::remove_dir(&test);
        ok
    })
}

/// One run's cgroup; removed by [`Group::remove`].
pub(crate) struct Group {
    dir: PathBuf,
    procs: fs::File,
}

impl Group {
    pub(crate) fn create(parent: &Path, max: u64) -> std::io::Result<Group> {
        let dir = parent.join(format!("strata-sandbox-{}", uuid::Uuid::new_v4().simple()));
        fs::create_dir(&dir)?;
        let setup = || -> std::io::Result<fs::File> {
            fs::OpenOptions::new()
                .write(true)
                .open(dir.join("pids.max"))?
                .write_all(max.to_string().as_bytes())?;
            fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
        };
        match setup() {
            Ok(procs) => Ok(Group { dir, procs }),
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    pub(crate) fn procs_fd(&self) -> i32 {
        self.procs.as_raw_fd()
    }

    fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// SIGKILLs every process in the group until it is empty (forks racing the kill are
    /// caught by the next pass; a bounded number of passes).
    pub(crate) fn kill_all(&self) {
        // v2 has a one-shot kill switch.
        let _ = fs::write(self.dir.join("cgroup.kill"), b"1");
        for _ in 0..1000 {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            for p in pids {
                if let Some(pid) = rustix::process::Pid::from_raw(p) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Kills what is left and removes the directory.
    pub(crate) fn remove(self) {
        self.kill_all();
        for _ in 0..1000 {
            if fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        tracing::warn!(dir = %self.dir.display(), "could not remove the sandbox cgroup");
    }
}

//! `strata audit verify` and `strata events`.

use std::io::Write;
use std::path::PathBuf;

use super::context::*;
use crate::Exit;

pub(crate) fn audit_verify(l: &Context, file: Option<PathBuf>) -> Exit {
    let path = file.unwrap_or_else(|| audit_path(l));
    match strata_store::audit_log::verify_all(&path) {
        Ok(Ok(r)) => {
            let note = if r.starts_mid_chain {
                " (the oldest kept file continues a chain whose start was rotated away)"
            } else {
                ""
            };
            out(&format!(
                "ok: {} records in {} file(s) ending at {}, chain intact{note}",
                r.records,
                r.files.len(),
                path.display()
            ))
        }
        Ok(Err((f, b))) => {
            println!("broken at line {} of {}: {}", b.line, f.display(), b.reason);
            Exit::Failure
        }
        Err(e) => fail(&anyhow::anyhow!("cannot read {}: {e}", path.display())),
    }
}

pub(crate) fn events(l: &Context, limit: usize, follow: bool) -> Exit {
    if !(1..=1000).contains(&limit) {
        eprintln!("error: --limit must be from 1 to 1000");
        return Exit::Usage;
    }
    let path = audit_path(l);
    let records = match strata_store::audit_log::tail(&path, limit) {
        Ok(r) => r,
        Err(e) => return fail(&anyhow::anyhow!("cannot read {}: {e}", path.display())),
    };
    for r in &records {
        println!("{r}");
    }
    if !follow {
        return Exit::Ok;
    }
    // Follow: print lines appended after what was shown (rotation-safe: restart on shrink).
    let mut pos = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len < pos {
            pos = 0;
        }
        if len > pos {
            use std::io::{Read, Seek, SeekFrom};
            if let Ok(mut f) = std::fs::File::open(&path) {
                let mut buf = String::new();
                if f.seek(SeekFrom::Start(pos)).is_ok() && f.read_to_string(&mut buf).is_ok() {
                    // Print whole lines only; a partial last line waits for the next round.
                    let complete = buf.rfind('\n').map_or(0, |i| i + 1);
                    let mut out = std::io::stdout().lock();
                    if write!(out, "{}", &buf[..complete])
                        .and_then(|()| out.flush())
                        .is_err()
                    {
                        return Exit::Ok; // the reader went away
                    }
                    pos += complete as u64;
                }
            }
        }
    }
}

//! `strata integrity check | accept`: the integrity baseline (see `crate::integrity`).

use serde_json::json;

use super::context::*;
use crate::Exit;
use crate::cli::IntegrityCommand;
use crate::integrity::{self, Watch};

pub(crate) fn run(l: &Context, command: IntegrityCommand) -> Exit {
    let watch = Watch::new(&l.config);
    let then = match integrity::load(&watch.data_dir) {
        Ok(b) => b,
        Err(e) => return fail(&anyhow::anyhow!(e)),
    };
    let now = match integrity::take(&watch) {
        Ok(b) => b,
        Err(e) => return fail(&anyhow::anyhow!(e)),
    };
    let drift = then.as_ref().map(|t| integrity::compare(t, &now));
    match command {
        IntegrityCommand::Check { json } => {
            if json {
                let _ = out(&serde_json::to_string_pretty(&json!({
                    "baseline": then.as_ref().map(|t| &t.taken_at),
                    "files": now.files.len(),
                    "changed": drift.as_ref().map(|d| &d.changed),
                    "added": drift.as_ref().map(|d| &d.added),
                    "removed": drift.as_ref().map(|d| &d.removed),
                }))
                .unwrap_or_default());
            }
            match (&then, &drift) {
                (None, _) => {
                    if !json {
                        eprintln!(
                            "no baseline yet at {} ({} files watched); take one with `strata integrity accept`",
                            watch.data_dir.join(integrity::BASELINE_FILE).display(),
                            now.files.len()
                        );
                    }
                    Exit::Failure
                }
                (Some(t), Some(d)) if !d.is_empty() => {
                    if !json {
                        eprintln!(
                            "files differ from the baseline of {}: {}\nif this was intended: `strata integrity accept`",
                            t.taken_at,
                            d.describe()
                        );
                    }
                    Exit::Failure
                }
                (Some(t), _) => {
                    if json {
                        Exit::Ok
                    } else {
                        out(&format!(
                            "{} files as in the baseline of {}",
                            now.files.len(),
                            t.taken_at
                        ))
                    }
                }
            }
        }
        IntegrityCommand::Accept => {
            if let Err(e) = integrity::store(&watch.data_dir, &now) {
                return fail(&anyhow::anyhow!(e));
            }
            let what = match &drift {
                None => "the first baseline".to_owned(),
                Some(d) if d.is_empty() => "nothing differed from the last one".to_owned(),
                Some(d) => format!("since the last one: {}", d.describe()),
            };
            out(&format!(
                "baseline of {} files taken ({what})",
                now.files.len()
            ))
        }
    }
}

//! Files in and out: attachments saved into the agents' workspaces (size cap, safe names),
//! and `[attach: path]` lines in replies read under the path guard.

/// Incoming attachments, saved into the agents' workspaces (`tools.terminal.workspace`), so
/// file tools and `terminal_exec` can open them.
pub(crate) struct Attachments {
    pub(crate) overlay: std::path::PathBuf,
    pub(crate) workspaces: std::path::PathBuf,
    /// Where reply attachments may come from (`tools.roots`), and the data dir (never).
    pub(crate) roots: Vec<std::path::PathBuf>,
    pub(crate) data_dir: std::path::PathBuf,
    pub(crate) max_bytes: u64,
    pub(crate) client: reqwest::Client,
}

/// A file name safe to write: letters, digits, `.`, `-`, `_`; no leading dot.
pub(crate) fn safe_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let s = s.trim_start_matches('.').to_owned();
    if s.is_empty() { "file".into() } else { s }
}

impl Attachments {
    /// Downloads each attachment (skipping those over the cap) and writes it to
    /// `<workspace>/<agent>/attachments/<message>-<name>`; returns per agent the lines to add
    /// to the message text.
    pub(crate) async fn save(
        &self,
        found: &[(String, String, u64)],
        message_id: &str,
        agents: &[String],
    ) -> std::collections::HashMap<String, Vec<String>> {
        let mut out: std::collections::HashMap<String, Vec<String>> = Default::default();
        for (name, url, size) in found {
            let note =
                |agent: &str,
                 text: String,
                 out: &mut std::collections::HashMap<String, Vec<String>>| {
                    out.entry(agent.to_owned()).or_default().push(text);
                };
            if *size > self.max_bytes {
                for a in agents {
                    note(
                        a,
                        format!(
                            "[attachment {name} not saved: {size} bytes is over the {} MiB limit]",
                            self.max_bytes >> 20
                        ),
                        &mut out,
                    );
                }
                continue;
            }
            let bytes = match self.fetch(url).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(file = %name, error = %e, "downloading an attachment failed");
                    for a in agents {
                        note(
                            a,
                            format!("[attachment {name} could not be downloaded]"),
                            &mut out,
                        );
                    }
                    continue;
                }
            };
            let file = format!("{message_id}-{}", safe_name(name));
            for a in agents {
                let dir = self.workspaces.join(a).join("attachments");
                let path = dir.join(&file);
                let written = tokio::fs::create_dir_all(&dir).await.is_ok()
                    && tokio::fs::write(&path, &bytes).await.is_ok();
                let shown = path
                    .strip_prefix(&self.overlay)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                if written {
                    note(
                        a,
                        format!("[attachment saved: {shown} ({} bytes)]", bytes.len()),
                        &mut out,
                    );
                } else {
                    note(
                        a,
                        format!("[attachment {name} could not be saved]"),
                        &mut out,
                    );
                }
            }
        }
        out
    }

    /// Files a reply asks to attach with lines `[attach: <path>]` (relative to the overlay,
    /// inside `tools.roots`, never secrets or the data dir; at most 10, each within the cap):
    /// returns the text without those lines (a note replaces any that could not be attached)
    /// and the files.
    pub(crate) async fn outgoing(&self, text: &str) -> (String, Vec<(String, Vec<u8>)>) {
        let mut kept = Vec::new();
        let mut files = Vec::new();
        for line in text.lines() {
            let t = line.trim();
            let Some(path) = t
                .strip_prefix("[attach:")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::trim)
            else {
                kept.push(line.to_owned());
                continue;
            };
            // Opened beneath its root: a symlink swapped in after the check is not followed.
            let opened = strata_engine::paths::open_guarded(
                std::path::Path::new(path),
                &self.overlay,
                &self.roots,
                std::slice::from_ref(&self.data_dir),
            );
            let loaded = match opened {
                Ok((f, p)) if files.len() < 10 => {
                    let mut f = tokio::fs::File::from_std(f);
                    match f.metadata().await {
                        Ok(m) if m.is_file() && m.len() <= self.max_bytes => {
                            let mut b = Vec::new();
                            tokio::io::AsyncReadExt::read_to_end(&mut f, &mut b)
                                .await
                                .ok()
                                .map(|_| (p, b))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            match loaded {
                Some((p, bytes)) => {
                    let name = p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .map(safe_name)
                        .unwrap_or_else(|| "file".into());
                    files.push((name, bytes));
                }
                None => kept.push(format!("(could not attach {path})")),
            }
        }
        let mut out = kept.join("\n");
        if text.ends_with('\n') {
            out.push('\n');
        }
        (out, files)
    }

    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut resp = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .error_for_status()
            .map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > self.max_bytes {
                return Err("larger than announced".into());
            }
        }
        Ok(body)
    }
}

//! Asking questions: a small trait so the wizard's logic does not depend on a terminal
//! library, and the inquire implementation used on a terminal.

/// What the wizard asks with.
pub trait Prompter {
    /// Free text, with a default shown and taken on Enter.
    fn text(&mut self, question: &str, default: Option<&str>) -> anyhow::Result<String>;
    /// Yes or no.
    fn confirm(&mut self, question: &str, default: bool) -> anyhow::Result<bool>;
    /// One of `options`; returns its index.
    fn select(&mut self, question: &str, options: &[&str]) -> anyhow::Result<usize>;
    /// Any of `options`; returns their indices.
    fn multi_select(&mut self, question: &str, options: &[&str]) -> anyhow::Result<Vec<usize>>;
    /// A secret, not echoed; empty = skipped.
    fn secret(&mut self, question: &str) -> anyhow::Result<zeroize::Zeroizing<String>>;
}

/// Ctrl-C or Esc at a prompt: nothing has been written yet.
#[derive(Debug)]
pub struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cancelled")
    }
}

impl std::error::Error for Cancelled {}

fn map(e: inquire::InquireError) -> anyhow::Error {
    match e {
        inquire::InquireError::OperationCanceled | inquire::InquireError::OperationInterrupted => {
            anyhow::Error::new(Cancelled)
        }
        inquire::InquireError::NotTTY => anyhow::anyhow!(
            "no terminal to ask on: give the answers in a file (`cargo xtask setup --answers answers.yaml`, see docs/DEPLOY.md)"
        ),
        other => anyhow::anyhow!(other),
    }
}

/// Questions on the terminal through inquire.
pub struct Terminal;

impl Prompter for Terminal {
    fn text(&mut self, question: &str, default: Option<&str>) -> anyhow::Result<String> {
        let mut t = inquire::Text::new(question);
        if let Some(d) = default {
            t = t.with_default(d);
        }
        t.prompt().map_err(map)
    }

    fn confirm(&mut self, question: &str, default: bool) -> anyhow::Result<bool> {
        inquire::Confirm::new(question)
            .with_default(default)
            .prompt()
            .map_err(map)
    }

    fn select(&mut self, question: &str, options: &[&str]) -> anyhow::Result<usize> {
        inquire::Select::new(question, options.to_vec())
            .raw_prompt()
            .map(|o| o.index)
            .map_err(map)
    }

    fn multi_select(&mut self, question: &str, options: &[&str]) -> anyhow::Result<Vec<usize>> {
        inquire::MultiSelect::new(question, options.to_vec())
            .raw_prompt()
            .map(|os| os.into_iter().map(|o| o.index).collect())
            .map_err(map)
    }

    fn secret(&mut self, question: &str) -> anyhow::Result<zeroize::Zeroizing<String>> {
        inquire::Password::new(question)
            .without_confirmation()
            .with_display_mode(inquire::PasswordDisplayMode::Masked)
            .prompt()
            .map(zeroize::Zeroizing::new)
            .map_err(map)
    }
}

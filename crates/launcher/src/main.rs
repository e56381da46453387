//! The core-only `strata` binary: engine and core tools, no modules. Deployments build their
//! own binary from an overlay crate (see `overlay-example/`).

fn main() -> std::process::ExitCode {
    strata_launcher::Launcher::new().run()
}

//! The example deployment's binary: the engine, core tools, the `ops` and `fleet` modules, and the tools in
//! `src/tools/`. A real deployment copies this crate (or runs `cargo xtask setup`).

mod tools;

fn main() -> std::process::ExitCode {
    strata_launcher::Launcher::new()
        // Modules in precedence order; `link()` also keeps each crate in the binary.
        .module(strata_mod_ops::link())
        .module(strata_mod_fleet::link())
        // Without --overlay / STRATA_OVERLAY, this crate's directory is the overlay.
        .default_overlay(env!("CARGO_MANIFEST_DIR"))
        .run()
}

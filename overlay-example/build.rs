//! Compiles in every file of `src/tools/` (`strata_build::tools`: a tool saved in its own
//! file needs no `mod` line), and links the example's machine code in the order
//! `link-order.txt` gives.
//!
//! `strata serve` runs a few thousand of the binary's functions from start to its first
//! answers, scattered over 12 MiB of code; the kernel maps 64 KiB around every page it faults
//! in, so an idle server kept nearly all of its code resident. `link-order.txt` lists the
//! functions `serve` runs (made by `cargo xtask link-order`, which runs the binary under
//! callgrind), and lld lays them out first, side by side. Symbols the file names that a build
//! does not have are ignored, so a stale file costs memory, never correctness.
//!
//! Only where the linker is the toolchain's lld (x86_64 Linux, no linker configured) and the
//! build is optimised: a debug build's symbols never match the file.

use std::path::Path;

fn main() {
    strata_build::tools();
    println!("cargo::rerun-if-changed=link-order.txt");
    println!("cargo::rerun-if-env-changed=RUSTC_LINKER");
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let lld = env("TARGET") == "x86_64-unknown-linux-gnu"
        && std::env::var_os("RUSTC_LINKER").is_none()
        && !["linker", "fuse-ld"]
            .iter()
            .any(|f| env("CARGO_ENCODED_RUSTFLAGS").contains(f));
    let file = Path::new(&env("CARGO_MANIFEST_DIR")).join("link-order.txt");
    if !lld || env("OPT_LEVEL") == "0" || !file.is_file() {
        return;
    }
    println!(
        "cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        file.display()
    );
    println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    // The symbols' hashes change with the compiler: say so when the file is from another one.
    let made_by = std::fs::read_to_string(&file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("# rustc ").map(str::to_owned));
    let rustc = std::process::Command::new(env("RUSTC"))
        .arg("-V")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    if let Some(made) = made_by
        && !rustc.is_empty()
        && rustc.strip_prefix("rustc ") != Some(made.as_str())
    {
        println!(
            "cargo::warning=link-order.txt was made with rustc {made}, this is {rustc}: its \
             symbols no longer match, so the idle server keeps more code resident; \
             `cargo xtask link-order` remakes it"
        );
    }
}

//! Path confinement against a writer inside a root: a directory flipped to a symlink that
//! points outside while reads run. Checking the path and then opening it by name let a read
//! land outside between the two; opening beneath the root's handle never does.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use strata_engine::paths::{PathError, open_guarded};

/// Flips `root/d` between a real directory and a symlink to `outside` until `stop`.
fn flipper(root: &Path, outside: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let (root, outside) = (root.to_path_buf(), outside.to_path_buf());
    std::thread::spawn(move || {
        let (d, real) = (root.join("d"), root.join("d.real"));
        let mut flips = 0;
        while !stop.load(Ordering::Relaxed) {
            if std::fs::rename(&d, &real).is_ok() {
                let _ = std::os::unix::fs::symlink(&outside, &d);
                std::thread::yield_now();
                let _ = std::fs::remove_file(&d);
                let _ = std::fs::rename(&real, &d);
                flips += 1;
            }
        }
        flips
    })
}

#[test]
fn a_symlink_swapped_in_after_the_check_is_never_followed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(root.join("d")).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(root.join("d/f"), "inside").expect("w");
    std::fs::write(outside.join("f"), "OUTSIDE").expect("w");
    let roots = vec![root.clone()];

    let stop = Arc::new(AtomicBool::new(false));
    let flips = flipper(&root, &outside, stop.clone());
    let (mut inside, mut refused) = (0, 0);
    for _ in 0..20_000 {
        match open_guarded(Path::new("d/f"), &root, &roots, &[]) {
            Ok((mut f, _)) => {
                let mut s = String::new();
                if std::io::Read::read_to_string(&mut f, &mut s).is_ok() {
                    assert_eq!(s, "inside", "a read escaped the root");
                    inside += 1;
                }
            }
            Err(PathError::Unresolvable { .. } | PathError::OutsideRoots { .. }) => refused += 1,
            Err(e) => panic!("unexpected refusal: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flips.join().expect("flipper");
    assert!(flips > 0 && inside > 0, "flips {flips}, reads {inside}");
    // Refusals are expected (the file is away half the time); escapes are not.
    let _ = refused;
}

#[test]
fn opening_keeps_the_guards_of_resolve() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::write(root.join("sub/a.txt"), "a").expect("w");
    std::fs::write(root.join("secrets.enc"), "x").expect("w");
    std::fs::write(tmp.path().join("out.txt"), "o").expect("w");
    std::os::unix::fs::symlink(tmp.path().join("out.txt"), root.join("out-link")).expect("ln");
    std::os::unix::fs::symlink(root.join("sub/a.txt"), root.join("in-link")).expect("ln");
    let roots = vec![root.clone()];
    let read = |p: &str| -> Result<String, PathError> {
        let (mut f, _) = open_guarded(Path::new(p), &root, &roots, &[])?;
        let mut s = String::new();
        std::io::Read::read_to_string(&mut f, &mut s).expect("read");
        Ok(s)
    };
    assert_eq!(read("sub/a.txt").expect("plain"), "a");
    assert_eq!(read("in-link").expect("a symlink inside the root"), "a");
    assert!(matches!(
        read("out-link"),
        Err(PathError::OutsideRoots { .. })
    ));
    assert!(matches!(
        read("../out.txt"),
        Err(PathError::OutsideRoots { .. })
    ));
    assert!(matches!(
        read("secrets.enc"),
        Err(PathError::Protected { .. })
    ));
    assert!(read("missing.txt").is_err());
}

//! What the build of the `dlock` executable needs beyond compiling: it links the unwinder in
//! (libgcc_eh.a) instead of loading libgcc_s.so at every start, where the C compiler has it: see
//! `static_unwinder`. (The Redis scripts' hashes are crates/redis's build.rs.)

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    static_unwinder();
}

/// dlock never unwinds (panics abort), yet Rust's standard library names the unwinder, so every
/// dlock started would load libgcc_s.so: one more library to map and relocate, and its CPU
/// feature probe at every start, 5% of a `dlock run NAME -- true` (docs/SPEED.md). The
/// same unwinder as a static archive, given to the linker before libgcc_s, makes libgcc_s
/// unneeded (it is linked `--as-needed`), as in a static build. Only for a native glibc build
/// whose C compiler has the archive (gcc's); otherwise libgcc_s stays, as before.
fn static_unwinder() {
    println!("cargo::rerun-if-env-changed=CC");
    let var = |name: &str| env::var(name).unwrap_or_default();
    let native = var("TARGET") == var("HOST");
    let static_build = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|f| f == "crt-static");
    if !native || static_build || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    let compiler = env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    // The build's own C compiler, not a program of the tests (clippy.toml's list is theirs).
    #[allow(clippy::disallowed_methods)]
    let Ok(asked) = Command::new(&compiler)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return;
    };
    let archive = String::from_utf8_lossy(&asked.stdout).trim().to_owned();
    // A compiler without it prints the bare name back.
    let archive = Path::new(&archive);
    if !asked.status.success() || !archive.is_absolute() || !archive.is_file() {
        return;
    }
    if let Some(dir) = archive.parent() {
        println!("cargo::rustc-link-search=native={}", dir.display());
        println!("cargo::rustc-link-lib=static=gcc_eh");
    }
}

//! What a build needs beyond compiling:
//! - Joins each Redis script to the shared prelude (`src/backend/redis/lib.lua`) and computes its
//!   SHA-1 here, at build time: dlock calls its scripts with EVALSHA, and hashing 4 KiB of Lua at
//!   every start would cost each run more than a round trip to a local server.
//! - Links the unwinder in (libgcc_eh.a) instead of loading libgcc_s.so at every start, where the
//!   C compiler has it: see `static_unwinder`.

use std::path::Path;
use std::process::Command;
use std::{env, fs};

const SCRIPTS: &str = "src/backend/redis";

fn main() {
    redis_scripts();
    static_unwinder();
}

fn redis_scripts() {
    println!("cargo::rerun-if-changed={SCRIPTS}");
    let read = |file: &str| {
        fs::read_to_string(Path::new(SCRIPTS).join(file))
            .unwrap_or_else(|e| panic!("cannot read {SCRIPTS}/{file}: {e}"))
    };
    let prelude = read("lib.lua");
    let mut out = String::new();
    for (name, file) in [
        ("ACQUIRE", "acquire.lua"),
        ("RENEW", "renew.lua"),
        ("RELEASE", "release.lua"),
        ("STATUS", "status.lua"),
        ("BREAK", "break.lua"),
        ("RAISE_TOKEN", "raise_token.lua"),
        ("KEY_TYPES", "key_types.lua"),
        ("LAST_RUNS", "last_runs.lua"),
    ] {
        let body = format!("{prelude}{}", read(file));
        let sha1 = sha1_smol::Sha1::from(&body).digest().to_string();
        out += &format!(
            "/// `{file}` after the prelude.\nstatic {name}: LuaScript = LuaScript {{ body: {body:?}, sha1: {sha1:?} }};\n"
        );
    }
    let target = Path::new(&env::var("OUT_DIR").expect("OUT_DIR")).join("redis_scripts.rs");
    fs::write(&target, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", target.display()));
}

/// dlock never unwinds (panics abort), yet Rust's standard library names the unwinder, so every
/// dlock started would load libgcc_s.so: one more library to map and relocate, and its CPU
/// feature probe at every start, 5% of a `dlock run NAME -- true` (docs/DESIGN.md, Speed). The
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
    #[allow(clippy::disallowed_methods)] // The C compiler the build uses, asked where a file is.
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

//! Joins each Redis script to the shared prelude (`src/lib.lua`) and computes its SHA-1 here, at
//! build time: dlock calls its scripts with EVALSHA, and hashing 4 KiB of Lua at every start would
//! cost each run more than a round trip to a local server.

use std::path::Path;
use std::{env, fs};

const SCRIPTS: &str = "src";

fn main() {
    redis_scripts();
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

//! The seams the compiler does not keep, read from the tree (these tests do not run dlock): the
//! crates docs/DESIGN.md's Layout lists are the ones under crates/, none of dlock's crates depends
//! on one it may not (a store crate naming another store's would build), and every crate but
//! dlock-sys forbids `unsafe`. The rules are in docs/DESIGN.md, under Layout and Crates.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The folders under crates/, sorted.
fn crate_folders() -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .filter_map(|p| Some(p.file_name()?.to_str()?.to_owned()))
        .collect();
    found.sort();
    found
}

/// The package's name and the dlock crates among the dependencies of the manifest at `path`
/// (a line `dlock-NAME...` in a dependencies section, dev-dependencies left out).
fn manifest(path: &Path) -> (String, BTreeSet<String>) {
    let text = std::fs::read_to_string(path).expect("a manifest");
    let mut name = None;
    let mut section = "";
    let mut deps = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with('[') {
            section = line;
        } else if section == "[package]" && line.starts_with("name = ") {
            name = Some(
                line.trim_start_matches("name = ")
                    .trim_matches('"')
                    .to_owned(),
            );
        } else if section == "[dependencies]" && line.starts_with("dlock-") {
            let dep = line.split(['.', ' ', '=']).next().unwrap_or(line);
            deps.insert(dep.to_owned());
        }
    }
    (name.expect("a package name"), deps)
}

/// The dlock crates each of dlock's crates may depend on (docs/DESIGN.md, Crates).
fn allowed(package: &str) -> Option<&'static [&'static str]> {
    const STORE: &[&str] = &["dlock-core", "dlock-sys"];
    match package {
        "dlock-sys" => Some(&[]),
        "dlock-core" => Some(&["dlock-sys"]),
        "dlock-file"
        | "dlock-redis"
        | "dlock-zk"
        | "dlock-etcd"
        | "dlock-sql"
        | "dlock-elasticsearch" => Some(STORE),
        _ => None,
    }
}

#[test]
fn the_layout_lists_every_crate_and_no_other() {
    let design = std::fs::read_to_string(root().join("docs/DESIGN.md")).expect("docs/DESIGN.md");
    let layout = design
        .split_once("  crates/ ")
        .and_then(|(_, rest)| rest.split_once("\n  src/ "))
        .map(|(crates, _)| crates)
        .expect("a crates/ block in DESIGN's Layout");
    let mut listed: Vec<String> = layout
        .lines()
        .filter_map(|line| line.strip_prefix("    "))
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|word| word.strip_suffix('/'))
        .map(str::to_owned)
        .collect();
    listed.sort();
    assert_eq!(listed, crate_folders(), "DESIGN's Layout against crates/");
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let mut wrong = Vec::new();
    for folder in crate_folders() {
        let (package, deps) = manifest(&root().join("crates").join(&folder).join("Cargo.toml"));
        let Some(may) = allowed(&package) else {
            wrong.push(format!(
                "crates/{folder} ({package}) is not in this test's list of layers"
            ));
            continue;
        };
        for dep in deps.iter().filter(|d| !may.contains(&d.as_str())) {
            wrong.push(format!("{package} depends on {dep}"));
        }
    }
    let (package, deps) = manifest(&root().join("Cargo.toml"));
    assert_eq!(package, "dlock-cli");
    for folder in crate_folders() {
        if !deps.contains(&format!("dlock-{folder}")) {
            wrong.push(format!("dlock-cli does not depend on crates/{folder}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn only_the_sys_crate_may_hold_unsafe_code() {
    let mut roots: Vec<PathBuf> = crate_folders()
        .into_iter()
        .filter(|f| f != "sys")
        .map(|f| root().join("crates").join(f).join("src/lib.rs"))
        .collect();
    roots.push(root().join("src/main.rs"));
    let lacking: Vec<String> = roots
        .iter()
        .filter(|path| {
            let text = std::fs::read_to_string(path).expect("a crate root");
            !text.lines().any(|l| l == "#![forbid(unsafe_code)]")
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        lacking.is_empty(),
        "no #![forbid(unsafe_code)] in {lacking:?}"
    );
}

//! The programs the tests run, from one list (programs.txt beside this file), which scripts/test
//! installs. A test starts a program only through `program`, which refuses one the list does not
//! name; a shell or dlock it starts finds only listed programs on its PATH, and any other program
//! the machine has answers with a line naming the list, and 127. So a test that starts using a
//! program the list lacks fails on the machine where it is written, not on the next new one,
//! where scripts/test would not have installed it. Needs only std: the unit tests in src/ and
//! crates/ use it too.

#![allow(dead_code)]

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Where the list is, as a failing test names it (a store's servers: its crate's programs.txt).
pub const LIST: &str = "tests/support/programs.txt";

/// One line of the list.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// A name looked up on PATH, or an absolute path.
    pub program: String,
    /// The Debian package scripts/test installs it from (`-`: none, as cargo's).
    pub package: String,
    /// Keeps the machine's whole PATH for what it runs itself (a server, a toolchain).
    pub own_path: bool,
}

/// The list, parsed once: this folder's, and each store's beside its crate
/// (`crates/NAME/programs.txt`, the servers its tests start), which a new store brings along.
pub fn listed() -> &'static [Listed] {
    static LISTED: OnceLock<Vec<Listed>> = OnceLock::new();
    LISTED.get_or_init(|| {
        let mut listed = parse(include_str!("programs.txt"));
        let crates = workspace().join("crates");
        let mut lists: Vec<PathBuf> = std::fs::read_dir(&crates)
            .map(|dir| {
                dir.flatten()
                    .map(|e| e.path().join("programs.txt"))
                    .collect()
            })
            .unwrap_or_default();
        lists.sort();
        for list in lists.iter().filter(|l| l.is_file()) {
            let text = std::fs::read_to_string(list)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", list.display()));
            listed.extend(parse(&text));
        }
        listed
    })
}

/// The workspace's root (the directory of Cargo.lock): this crate's, or the one above a crate of
/// crates/ whose unit tests use this file.
fn workspace() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(manifest)
}

fn parse(text: &str) -> Vec<Listed> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(
                (2..=3).contains(&fields.len()) && fields.get(2).is_none_or(|f| *f == "own-path"),
                "{LIST}: a line is `program package [own-path]`, not {line:?}"
            );
            Listed {
                program: fields[0].to_string(),
                package: fields[1].to_string(),
                own_path: fields.len() == 3,
            }
        })
        .collect()
}

/// The list's line for `program`, or a panic naming the program and the list: the failure of the
/// test that tried to run it.
pub fn entry(program: &str) -> &'static Listed {
    listed()
        .iter()
        .find(|l| l.program == program)
        .unwrap_or_else(|| {
            panic!(
                "the tests run `{program}`, which is not in {LIST} (the programs scripts/test \
                 installs): add a line for it there"
            )
        })
}

/// A command for `program`, which the list must name (else the test panics, naming both). A
/// program without `own-path` gets a PATH of listed programs only: what it runs by name is held
/// to the list too.
#[allow(clippy::disallowed_methods)] // The one place a test makes a `Command` of a program.
pub fn program(program: &str) -> Command {
    let entry = entry(program);
    let mut cmd = Command::new(program);
    if !entry.own_path {
        cmd.env("PATH", listed_path());
    }
    cmd
}

/// A build of dlock at `path` (the one under test, another a benchmark compares it with, or this
/// test executable): cargo made it, no package has it, so the list does not name it. It too finds
/// only listed programs on its PATH.
#[allow(clippy::disallowed_methods)] // A build, not a program of the machine's.
pub fn build(path: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(path);
    cmd.env("PATH", listed_path());
    cmd
}

/// `program`, or `build` for an absolute path the list does not name (a benchmark's subject,
/// given as a dlock build or a peer's program).
pub fn program_or_build(path: &str) -> Command {
    if path.starts_with('/') && !listed().iter().any(|l| l.program == path) {
        build(path)
    } else {
        program(path)
    }
}

/// A PATH holding only the listed programs (each that this machine has, by its name), then every
/// other program on the machine's PATH as a stand-in that names the list and exits 127.
pub fn listed_path() -> OsString {
    static PATH: OnceLock<OsString> = OnceLock::new();
    PATH.get_or_init(make_listed_path).clone()
}

fn make_listed_path() -> OsString {
    // A unit test has no CARGO_TARGET_TMPDIR: the workspace's target/tmp, not one inside a crate.
    let base = option_env!("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/tmp"))
        .join("listed-programs");
    remove_dead_processes_dirs(&base);
    let dir = base.join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    let (allowed, refused) = (dir.join("listed"), dir.join("not-listed"));
    for d in [&allowed, &refused] {
        std::fs::create_dir_all(d).expect("listed programs' directory");
    }
    let machine_path = std::env::var_os("PATH").unwrap_or_default();
    let on_path = |name: &str| {
        std::env::split_paths(&machine_path)
            .map(|d| d.join(name))
            .find(|p| is_executable(p))
    };
    for l in listed().iter().filter(|l| !l.program.starts_with('/')) {
        if let Some(found) = on_path(&l.program) {
            let _ = std::os::unix::fs::symlink(found, allowed.join(&l.program));
        }
    }
    let stand_in = dir.join("not-listed.sh");
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\necho \"the tests ran \\`${{0##*/}}', which is not in {LIST} (the \
             programs scripts/test installs): add a line for it there\" >&2\nexit 127\n"
        ),
    )
    .expect("stand-in");
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for d in std::env::split_paths(&machine_path) {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let link = refused.join(&name);
            if !allowed.join(&name).exists() && !link.exists() && is_executable(&e.path()) {
                let _ = std::os::unix::fs::symlink(&stand_in, link);
            }
        }
    }
    std::env::join_paths([allowed, refused]).expect("PATH")
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The directories of test processes that have ended (each is named by its process's pid).
fn remove_dead_processes_dirs(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let pid = e.file_name().to_string_lossy().to_string();
        if !Path::new("/proc").join(&pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
#[allow(unused_imports)] // Where a benchmark includes this file, its tests are not built.
mod tests {
    use super::*;

    #[test]
    fn every_line_of_the_list_parses_and_names_a_program_once() {
        let mut seen = std::collections::BTreeSet::new();
        for l in listed() {
            assert!(seen.insert(&l.program), "{LIST} names {} twice", l.program);
            assert!(!l.package.is_empty());
        }
        assert!(seen.contains(&"sudo".to_string()));
    }

    #[test]
    #[should_panic(expected = "not in tests/support/programs.txt")]
    fn a_program_not_listed_is_refused_naming_the_list() {
        let _ = program("a-program-nobody-listed");
    }

    #[test]
    fn a_shell_finds_listed_programs_and_is_told_of_others() {
        let out = program("sh")
            .args([
                "-c",
                "true && sudo --version >/dev/null; echo $?; apt-get --version",
            ])
            .output()
            .expect("sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stdout.lines().next(), Some("0"), "sudo is listed: {stderr}");
        assert_eq!(out.status.code(), Some(127), "{stderr}");
        assert!(
            stderr.contains("`apt-get', which is not in tests/support/programs.txt"),
            "{stderr}"
        );
    }
}

//! Whether the command can run at all, found out before any lock is taken: a command that is not
//! found (127) or not executable (126) must not create a lock file, key or node, nor spend a token.
//! The checks are those `execve` would make, so its answer is known in advance; whatever still
//! fails at the exec itself (a file changed meanwhile, a missing ELF loader) is reported then.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::exit::Status;
use crate::report;

/// The kernel reads at most this much of a `#!` line (BINPRM_BUF_SIZE).
const SHEBANG_MAX: usize = 256;

/// Why the command cannot run.
#[derive(Debug, PartialEq, Eq)]
pub enum CannotRun {
    NotFound,
    /// Found, but not something the user may execute: why.
    NotExecutable(String),
    /// A script whose `#!` interpreter does not exist.
    NoInterpreter(PathBuf),
    /// A script whose `#!` interpreter exists but cannot be executed: which, and why.
    BadInterpreter(PathBuf, String),
}

impl CannotRun {
    /// The exit status, as a shell gives it: 127 when something is missing, 126 when it is there
    /// but cannot run.
    pub fn status(&self) -> Status {
        match self {
            CannotRun::NotFound | CannotRun::NoInterpreter(_) => Status::NotFound,
            CannotRun::NotExecutable(_) | CannotRun::BadInterpreter(..) => Status::NotExecutable,
        }
    }

    /// The one-line message for `program` as the user typed it.
    pub fn message(&self, program: &str) -> String {
        match self {
            CannotRun::NotFound => format!("command not found: {program}"),
            CannotRun::NotExecutable(why) => format!("cannot execute {program}: {why}"),
            CannotRun::NoInterpreter(interpreter) => format!(
                "cannot execute {program}: its interpreter {} was not found",
                interpreter.display()
            ),
            CannotRun::BadInterpreter(interpreter, why) => format!(
                "cannot execute {program}: its interpreter {}: {why}",
                interpreter.display()
            ),
        }
    }
}

/// The file `execve` will run for `program` (looked up in PATH when it has no `/`, as execvp
/// does), after checking that it can: it exists, is a file the user may execute, and if it is a
/// script, so is its `#!` interpreter. A file that is neither a binary nor a `#!` script is fine:
/// it runs under /bin/sh, as execvp and flock(1) run it.
pub fn resolve(program: &str) -> Result<PathBuf, CannotRun> {
    let path = if program.contains('/') {
        let path = PathBuf::from(program);
        executable(&path)?;
        path
    } else {
        search_path(program)?
    };
    check_interpreter(&path)?;
    Ok(path)
}

/// The first executable file named `program` in PATH; `NotExecutable` when there are only ones the
/// user may not execute.
fn search_path(program: &str) -> Result<PathBuf, CannotRun> {
    if program.is_empty() {
        return Err(CannotRun::NotFound);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut denied = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(CannotRun::NotExecutable(why)) if candidate.is_file() => {
                denied.get_or_insert(CannotRun::NotExecutable(why));
            }
            Err(_) => {}
        }
    }
    Err(denied.unwrap_or(CannotRun::NotFound))
}

/// Whether `path` is a file the user may execute.
fn executable(path: &Path) -> Result<(), CannotRun> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => CannotRun::NotFound,
        _ => CannotRun::NotExecutable(report::plain(&e)),
    })?;
    if meta.is_dir() {
        return Err(CannotRun::NotExecutable("is a directory".into()));
    }
    if !meta.is_file() || !may_execute(path) {
        return Err(CannotRun::NotExecutable("permission denied".into()));
    }
    Ok(())
}

fn may_execute(path: &Path) -> bool {
    rustix::fs::access(path, rustix::fs::Access::EXEC_OK).is_ok()
}

/// For a `#!` script, that its interpreter exists and may be executed. A file dlock cannot read
/// is left to the exec: a binary may be executable without being readable.
fn check_interpreter(script: &Path) -> Result<(), CannotRun> {
    let mut head = [0u8; SHEBANG_MAX];
    let Ok(mut file) = File::open(script) else {
        return Ok(());
    };
    let mut len = 0;
    while len < head.len() {
        match file.read(&mut head[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(()),
        }
    }
    let Some(interpreter) = interpreter(&head[..len]) else {
        return Ok(());
    };
    match executable(&interpreter) {
        Ok(()) => Ok(()),
        Err(CannotRun::NotFound) => Err(CannotRun::NoInterpreter(interpreter)),
        Err(CannotRun::NotExecutable(why)) => Err(CannotRun::BadInterpreter(interpreter, why)),
        Err(other) => Err(other),
    }
}

/// The interpreter a `#!` line names, parsed as the kernel does: blanks after `#!`, then the path
/// up to the next blank or the end of the line.
fn interpreter(head: &[u8]) -> Option<PathBuf> {
    let rest = head.strip_prefix(b"#!")?;
    let blank = |b: &u8| matches!(b, b' ' | b'\t');
    let start = rest.iter().position(|b| !blank(b))?;
    let rest = &rest[start..];
    let end = rest
        .iter()
        .position(|b| blank(b) || matches!(b, b'\n' | b'\0'))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    (!name.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_is_read_as_the_kernel_reads_it() {
        let name = |s: &[u8]| interpreter(s).map(|p| p.display().to_string());
        assert_eq!(name(b"#!/bin/sh\necho"), Some("/bin/sh".into()));
        assert_eq!(
            name(b"#! \t/usr/bin/env python3 -u\n"),
            Some("/usr/bin/env".into())
        );
        assert_eq!(name(b"#!/bin/sh"), Some("/bin/sh".into()));
        assert_eq!(name(b"#!\n/bin/sh"), None);
        assert_eq!(name(b"#!   "), None);
        assert_eq!(name(b"echo hi\n"), None);
        assert_eq!(name(b"\x7fELF"), None);
        assert_eq!(name(b""), None);
    }
}

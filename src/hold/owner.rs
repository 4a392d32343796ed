//! Whose hold it is: the process a keeper keeps the lock for, and watches to release it. A hold is
//! only as good as that choice. A parent that is not a shell (`timeout`, `sudo`, `xargs`) ends or
//! moves on while the script it serves goes on, so the lock would go with it while the script
//! believes it holds it: refused, unless the owner is named with `--owner`. A shell that runs
//! `v=$(dlock hold ...)` in a subshell of its own instead of running dlock directly (bash does when
//! the substitution has a redirection, `2>&1`) would own the hold for a subshell that ends at
//! once: that subshell is recognised (a copy of its parent shell, not a new program, whose
//! standard output is a pipe the parent shell reads) and the hold is kept for the shell that reads
//! it.

use anyhow::anyhow;

use super::registry::{self, Process};
use crate::failure::{FailWith, Failure};
use crate::report::Reporter;

/// The programs known to be shells that run a script's lines one after another in the same
/// process: the owner stays as long as the script runs. Matched on the program's file name,
/// without a version suffix (`bash5.2`, `zsh-5.9`).
const SHELLS: [&str; 14] = [
    "sh", "ash", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "lksh", "pdksh", "oksh", "yash",
    "posh", "fish",
];

/// busybox is many programs: a shell only when run as one of these applets.
const BUSYBOX_SHELLS: [&str; 3] = ["sh", "ash", "hush"];

/// The process to keep the hold for: `explicit` (`--owner`), which must be an ancestor of this
/// process, or else this process's parent if it is a shell (or the shell a command-substitution
/// subshell of it reads for). Anything else is a usage error that says why.
pub fn find(explicit: Option<u32>, report: &Reporter) -> anyhow::Result<Process> {
    let own = std::process::id();
    let ancestors = registry::ancestry(own);
    if let Some(pid) = explicit {
        let owner = ancestors
            .iter()
            .skip(1)
            .find(|p| p.pid == pid)
            .copied()
            .ok_or_else(|| {
                anyhow!(
                    "--owner {pid} is not a process that dlock hold runs under (one of its \
                     ancestors); the hold would have nobody to keep it for"
                )
            })
            .fail_with(Failure::Usage)?;
        return explicit_owner_ok(owner).map(|()| owner);
    }
    let Some(parent) = ancestors.get(1).copied() else {
        return Err(anyhow!("cannot find the process that runs dlock hold"))
            .fail_with(Failure::Usage);
    };
    if !is_shell(parent.pid) {
        return Err(anyhow!(
            "dlock hold's parent (pid {}, {}) is not a shell: it would hold the lock for a process \
             that is not the script; run dlock hold from the script's shell itself, or name the \
             owner with --owner PID",
            parent.pid,
            program_name(parent.pid).unwrap_or_else(|| "unknown program".to_owned())
        ))
        .fail_with(Failure::Usage);
    }
    if let Some(shell) = ancestors.get(2).copied() {
        if is_command_substitution_of(parent.pid, shell.pid) {
            report.event(&format!(
                "dlock hold runs in a subshell (pid {}) of the shell (pid {}) that reads its \
                 output: keeping the hold for that shell",
                parent.pid, shell.pid
            ));
            return Ok(shell);
        }
    }
    Ok(parent)
}

/// Whether `--owner` may name `owner`: not pid 1, whose hold would last until the reboot, and
/// not another user's process unless dlock runs as root (`sudo dlock hold --owner $$`): a hold
/// kept for a process its keeper cannot answer to.
fn explicit_owner_ok(owner: Process) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if owner.pid == 1 {
        return Err(anyhow!(
            "--owner 1 is the system's first process (init): the hold would last until the \
             machine stops; name the script's shell (--owner $$)"
        ))
        .fail_with(Failure::Usage);
    }
    let me = rustix::process::geteuid().as_raw();
    let theirs = std::fs::metadata(format!("/proc/{}", owner.pid)).map(|m| m.uid());
    match theirs {
        Ok(uid) if me == 0 || uid == me => Ok(()),
        Ok(uid) => Err(anyhow!(
            "--owner {} is a process of another user (uid {uid}); only root may hold for another \
             user's process",
            owner.pid
        ))
        .fail_with(Failure::Usage),
        Err(e) => Err(anyhow!(
            "cannot tell whose process --owner {} is: {}",
            owner.pid,
            crate::report::plain(&e)
        ))
        .fail_with(Failure::Usage),
    }
}

/// The program `pid` runs, as a file name: `/proc/PID/exe`'s, else its command name.
fn program_name(pid: u32) -> Option<String> {
    if let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) {
        if let Some(name) = exe.file_name().and_then(|n| n.to_str()) {
            return Some(name.to_owned());
        }
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_owned())
}

fn cmdline(pid: u32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline")).ok()
}

/// Whether `pid` runs a shell. Its program must be readable (`/proc/PID/exe`): a parent of another
/// user (sudo) is not one dlock can keep a hold for anyway.
fn is_shell(pid: u32) -> bool {
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return false;
    };
    let Some(name) = exe.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if name == "busybox" {
        let Some(argv) = cmdline(pid) else {
            return false;
        };
        let mut words = argv.split(|&b| b == 0).map(base_name);
        let applet = match words.next() {
            Some(b"busybox") => words.next(),
            first => first,
        };
        return applet.is_some_and(|a| BUSYBOX_SHELLS.iter().any(|s| s.as_bytes() == a));
    }
    SHELLS.contains(&without_version(name))
}

/// A path's last component, `-` of a login shell's `-bash` dropped.
fn base_name(path: &[u8]) -> &[u8] {
    let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    base.strip_prefix(b"-").unwrap_or(base)
}

/// `bash5.2` -> `bash`, `zsh-5.9` -> `zsh`.
fn without_version(name: &str) -> &str {
    name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-')
        .trim_end_matches(|c: char| c.is_ascii_digit())
}

/// Whether `sub` is a subshell `shell` forked for a command substitution: the same program with
/// the same arguments (a fork, not a new program), whose standard output is a pipe that `shell`
/// has open (the end it reads the substitution's output from).
fn is_command_substitution_of(sub: u32, shell: u32) -> bool {
    let same_program = std::fs::read_link(format!("/proc/{sub}/exe")).ok()
        == std::fs::read_link(format!("/proc/{shell}/exe")).ok()
        && cmdline(sub).is_some()
        && cmdline(sub) == cmdline(shell);
    if !same_program {
        return false;
    }
    let Ok(out) = std::fs::read_link(format!("/proc/{sub}/fd/1")) else {
        return false;
    };
    if !out.to_string_lossy().starts_with("pipe:") {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{shell}/fd")) else {
        return false;
    };
    // The read end: a shell that only shares the write end (`( dlock hold ...; work ) | tee log`)
    // is not reading the subshell's output, and the subshell is the owner.
    fds.filter_map(|e| e.ok())
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|target| target == out))
        .any(|e| is_read_end(shell, &e.file_name()))
}

/// Whether descriptor `fd` of `pid` is open for reading only (the `flags:` line of its fdinfo, in
/// octal: O_ACCMODE is 0 for O_RDONLY).
fn is_read_end(pid: u32, fd: &std::ffi::OsStr) -> bool {
    let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.to_string_lossy()))
    else {
        return false;
    };
    info.lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
        .is_some_and(|flags| flags & 0o3 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_names_are_read_without_versions_and_login_dashes() {
        assert_eq!(without_version("bash5.2"), "bash");
        assert_eq!(without_version("zsh-5.9"), "zsh");
        assert_eq!(without_version("ksh93"), "ksh");
        assert!(SHELLS.contains(&without_version("ksh93")));
        assert_eq!(base_name(b"-bash"), b"bash");
        assert_eq!(base_name(b"/bin/sh"), b"sh");
        assert!(!SHELLS.contains(&without_version("timeout")));
    }
}

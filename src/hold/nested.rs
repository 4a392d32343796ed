//! A `dlock run` inside a script that holds its lock with `dlock hold`. The hold's keeper is no
//! ancestor of the run, so the run cannot prove it the way it proves a parent dlock's claim
//! (reentry.rs), and without this it would wait for its own script forever. It asks the keeper
//! instead, through the registry entry of one of its ancestor shells: the entry lives in the user's
//! private directory, the keeper answers only that shell and its descendants, and the run takes
//! an answer only from a process of its own user and only about the shell whose entry it asked
//! (the keeper holds the lock for that shell, and its records name it). What the keeper says is
//! then proven against the backend like any claim (`reentry::decide`).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::keeper::WHO;
use super::registry;
use crate::backend::BackendConfig;
use crate::lock::LockName;
use crate::reentry::Claim;

/// How long to wait for a keeper's answer; one that does not answer covers nothing.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Most bytes of an answer read: a few claim lines.
const ANSWER_MOST: u64 = 64 * 1024;

/// The claims the keepers of this process's ancestor shells make to `names`. Costs one look at the
/// registry directory when there are no holds (the common case), one listing when there are.
pub fn claims(backend: &BackendConfig, names: &[&LockName]) -> Vec<Claim> {
    let Ok(dir) = registry::dir(false) else {
        return Vec::new();
    };
    let Ok(listing) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let entries: HashSet<std::ffi::OsString> =
        listing.filter_map(|e| Some(e.ok()?.file_name())).collect();
    if entries.is_empty() {
        return Vec::new();
    }
    let place = registry::place(backend);
    let mut claims = Vec::new();
    for shell in registry::ancestry(std::process::id()).into_iter().skip(1) {
        for name in names {
            let path = registry::entry(&dir, shell, &place, name);
            if path.file_name().is_some_and(|f| entries.contains(f)) {
                claims.extend(ask(&path, shell.pid));
            }
        }
    }
    claims
}

/// What the keeper at `path` says it holds for `shell`, if it is a process of this user.
fn ask(path: &std::path::Path, shell: u32) -> Vec<Claim> {
    let Ok(mut conn) = UnixStream::connect(path) else {
        return Vec::new();
    };
    let Ok(peer) = rustix::net::sockopt::socket_peercred(conn.as_fd()) else {
        return Vec::new();
    };
    if peer.uid != rustix::process::getuid() {
        return Vec::new();
    }
    let mut answer = String::new();
    let asked = conn.set_read_timeout(Some(ANSWER_WITHIN)).is_ok()
        && writeln!(conn, "{WHO}").is_ok()
        && (&mut conn)
            .take(ANSWER_MOST)
            .read_to_string(&mut answer)
            .is_ok();
    if !asked {
        return Vec::new();
    }
    answer
        .lines()
        .filter_map(|line| Claim::from_keeper(line, shell))
        .collect()
}

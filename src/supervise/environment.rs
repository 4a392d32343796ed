//! What the command receives from dlock besides its arguments: the DLOCK_* variables naming the
//! backend, the locks and their fencing tokens, the claims a nested dlock checks, and the open-file
//! limit dlock started with (dlock raises its own to hold many locks at once).

use std::ffi::OsStr;

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

use super::heartbeat::Held;
use super::RunPlan;
use crate::reentry::{self, Claim};

/// A lock may hold a descriptor (a lock file, a connection), so many names at once can pass the
/// usual soft limit of 1024 open files: raise it to the hard limit when needed. Returns the limit
/// to restore for the command, which should not inherit dlock's.
pub(super) fn raise_file_limit(locks: usize) -> Option<Rlimit> {
    let original = getrlimit(Resource::Nofile);
    // No soft limit (None) is no limit: nothing to raise.
    let soft = original.current?;
    if (locks as u64).saturating_add(64) < soft {
        return None;
    }
    let raised = Rlimit {
        current: original.maximum,
        maximum: original.maximum,
    };
    setrlimit(Resource::Nofile, raised).ok().map(|()| original)
}

/// Whether a variable of dlock's environment is kept from the command: DLOCK_URL and the mark of
/// a password left out of it, which dlock sets again from the place it uses (`cli::place`), with
/// no password in it, or leaves unset where the nested dlock finds the place itself (the
/// configuration file, the default).
pub(super) fn withheld(name: &OsStr) -> bool {
    name == "DLOCK_URL" || name == crate::url::PASSWORD_WITHHELD_VAR
}

/// The lock-related variables the command sees (added to dlock's own environment).
pub(super) fn for_command(
    held: &[Held],
    plan: &RunPlan,
    location: &str,
    inherited: &[Claim],
) -> Vec<(String, String)> {
    let mut env = vec![(
        "DLOCK_BACKEND".to_owned(),
        plan.backend.kind.as_str().to_owned(),
    )];
    // Held is in canonical (sorted) order; the last is the name itself for one lock, and the path
    // itself for one --tree path (its ancestors sort before it).
    if let Some(last) = held.last() {
        env.push(("DLOCK_NAME".into(), last.name.to_string()));
        env.push(("DLOCK_TOKEN".into(), last.lease.token().to_string()));
    }
    if held.len() > 1 {
        env.push(("DLOCK_LOCKS".into(), held.len().to_string()));
        for (i, h) in held.iter().enumerate() {
            env.push((format!("DLOCK_NAME_{}", i + 1), h.name.to_string()));
            env.push((
                format!("DLOCK_TOKEN_{}", i + 1),
                h.lease.token().to_string(),
            ));
        }
    }
    // What a nested dlock needs to prove that this one holds its locks: the inherited claims it
    // may still rely on, and this dlock's own.
    let start = reentry::claimant_start();
    let own: Vec<Claim> = held
        .iter()
        .filter_map(|h| Claim::own(location, &h.name, &h.owner, start))
        .collect();
    env.push((
        reentry::HELD_VAR.into(),
        reentry::held_value(inherited, &own),
    ));
    env
}

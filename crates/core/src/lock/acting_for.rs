//! Which process a holder record names. A `dlock run` names itself. A `dlock hold` is kept by a
//! keeper process, but the lock is held for the script's shell: the keeper says so once, at its
//! start (`act_for`), and every record it writes names the shell (`record_pid`), so that `status`
//! shows the process a user knows. The keeper's own pid is still what the kernel lists for its
//! file locks: `keeper_shell` tells a keeper's flock(2) lock from another program's.

use std::sync::OnceLock;

/// Set by `dlock hold` on the keeper it starts: `SHELL_PID.SHELL_START/FRONT_PID` (the hold's
/// front reads it back to know it is a keeper; see the binary's hold module).
pub const KEEPER_VAR: &str = "DLOCK_KEEPER_OF";

static ACTING_FOR: OnceLock<u32> = OnceLock::new();

/// This process keeps locks for `pid` (a hold's keeper for its shell): its records name that pid.
/// Once, before any lock is taken; a later call changes nothing.
pub fn act_for(pid: u32) {
    let _ = ACTING_FOR.set(pid);
}

/// The pid this process's holder records (and run records) name.
pub fn record_pid() -> u32 {
    ACTING_FOR.get().copied().unwrap_or_else(std::process::id)
}

/// The shell a hold's keeper `pid` keeps locks for, as its environment says; `None` for any other
/// process, or one whose environment cannot be read (another user's, without root).
pub fn keeper_shell(pid: u32) -> Option<u32> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    shell_in(&environ)
}

/// The shell's pid in a keeper's environment (NUL-separated `NAME=value` entries).
fn shell_in(environ: &[u8]) -> Option<u32> {
    let prefix = format!("{KEEPER_VAR}=");
    let value = environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))?;
    let value = std::str::from_utf8(value).ok()?;
    let shell = value.split_once('/')?.0;
    shell.split_once('.')?.0.parse().ok().filter(|&p| p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keepers_environment_names_its_shell() {
        let environ = b"HOME=/root\0DLOCK_KEEPER_OF=4242.98765/4300\0PATH=/bin\0";
        assert_eq!(shell_in(environ), Some(4242));
    }

    #[test]
    fn other_environments_name_none() {
        assert_eq!(shell_in(b"HOME=/root\0PATH=/bin\0"), None);
        assert_eq!(shell_in(b"DLOCK_KEEPER_OF=x.1/2\0"), None);
        assert_eq!(shell_in(b"DLOCK_KEEPER_OF=0.1/2\0"), None);
        assert_eq!(shell_in(b"XDLOCK_KEEPER_OF=1.1/2\0"), None);
    }
}

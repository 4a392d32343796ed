//! The words around the options in `-h`, `--help` and the man pages: what dlock and `run` do, the
//! exit statuses at the end, and where to read on.

use crate::exit;

/// Where `--help` points for the rest.
const READ_ON: &str = "\
Options beat DLOCK_* variables, which beat the configuration files (see FILES).
The manual: man dlock, man dlock-run; the settings in force: dlock config.";

/// Where `-h` points for the rest, in one line, so that it fits a screen.
const READ_ON_BRIEFLY: &str =
    "The manual: man dlock, man dlock-run; the settings in force: dlock config.";

/// The end of `--help` (dlock's and run's): the exit statuses, then where to read on.
pub fn after_long_help() -> String {
    format!("{}\n\n{READ_ON}", exit::help_table())
}

/// The end of `-h`: an example, the statuses in short, then where to read on.
pub fn after_help() -> String {
    format!("{EXAMPLE}\n{}\n\n{READ_ON_BRIEFLY}", exit::short_table())
}

/// The one example `-h` shows: the line a newcomer types first.
const EXAMPLE: &str = "Example: dlock run -n nightly -- ./backup.sh   (75 at once if busy)";

/// `run`'s usage line: the command is required, after `--` or as `-c` (clap would show the
/// `--` part optional, since `-c` may stand for it).
pub const RUN_USAGE: &str = "dlock run [OPTIONS] <NAME>... -- <COMMAND>...
       dlock run [OPTIONS] <NAME>... -c <SHELL_COMMAND>";

/// What `dlock --help` and dlock(1) say after the one-line summary, which they do not repeat.
pub const DESCRIPTION: &str =
    "dlock takes a named lock, runs a command while holding it, keeps the \
lock alive while the command runs, and releases it when the command exits or a signal arrives. \
The lock lives in a backend: lock files on this machine (file, the default), or a Redis, \
ZooKeeper, etcd, PostgreSQL or MySQL server, which makes it one lock for every host that uses \
that server. The exit status is the command's, or one of dlock's own: 75 when the lock is busy, \
79 when it was lost, 69 when the backend cannot be reached (see EXIT STATUS).";

/// What `dlock run --help` and dlock-run(1) say.
pub const RUN_DESCRIPTION: &str =
    "Waits for the lock (with -n, exits 75 at once if it is busy; with \
-w, after that long), then starts COMMAND in a process group of its own, renews the lock while \
COMMAND runs and releases it when COMMAND exits, with COMMAND's exit status. Signals sent to \
dlock are passed on to COMMAND. If the lock is lost, COMMAND is terminated (SIGTERM, then SIGKILL \
after --kill-after) and dlock exits 79; if dlock itself dies, a guardian process kills COMMAND, \
so nothing runs on without the lock.";

//! Every exit status dlock can end with, in one place: `Status` is the table. `--help`, the man
//! page (generated from it, see `help_table`) and the README's table speak of the same numbers (a
//! test checks the README). A child's own status passes through unchanged; the others are dlock's.
//! Everything inside dlock passes a `Status`; only `main` turns it into a process exit code.

/// How `dlock` ends. `code` is the number a shell sees; `help_table` is the table `--help` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The command ran and exited with this status.
    Command(u8),
    /// 0 for dlock's own subcommands: `status` found the lock held, `release` released it, `list`
    /// and `generate` did their job.
    Done,
    /// `status`: the lock is free; `release`: nothing was held.
    Free,
    /// Death by signal N, as shells report it (128+N): the command's, or dlock's own while it was
    /// connecting or waiting.
    Signalled(i32),
    /// The lock is held by someone else and `--no-wait` was given or `--wait` expired (EX_TEMPFAIL,
    /// [`Status::BUSY_DEFAULT`]); the status is `--conflict-exit-code`'s.
    Busy(u8),
    /// The lock was lost while the command ran (lease expired, broken by `release --force`, backend
    /// gone for longer than the lease); the command was terminated.
    LockLost,
    /// `run --supersede`: a newer `--supersede` run started waiting for the same names, and this
    /// one gave up its wait (not changed by `--conflict-exit-code`).
    Superseded,
    /// `run --cancel-in-progress`: a newer run with the option asked this holder to end; its
    /// command was terminated (not changed by `--conflict-exit-code`).
    Cancelled,
    /// Bad command line (EX_USAGE), or a nested run that asks exclusively for a lock its own parent
    /// dlock holds shared or with a limit.
    Usage,
    /// The backend cannot be reached or used (EX_UNAVAILABLE).
    Unavailable,
    /// A failure that is dlock's own (EX_SOFTWARE).
    Internal,
    /// The command exists but cannot be executed.
    NotExecutable,
    /// The command was not found.
    NotFound,
    /// `status --ran-within`: how the last success stands, in the monitoring plugins' numbers.
    Check(Check),
    /// `list --runs` stopped at `MAX_LISTED_RUNS` names: what it printed is not all.
    Incomplete,
}

/// `status --ran-within`'s answer, as Nagios and its kin read a check's exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The last success ended within the time asked.
    Ok,
    /// It ended longer ago.
    Warning,
    /// There is no success on record.
    Critical,
    /// The store could not be asked, or its records could not be read.
    Unknown,
}

impl Check {
    /// The word a monitoring system shows first.
    pub fn word(self) -> &'static str {
        match self {
            Check::Ok => "OK",
            Check::Warning => "WARNING",
            Check::Critical => "CRITICAL",
            Check::Unknown => "UNKNOWN",
        }
    }
}

/// The rows of the table in `--help`, in the order shown.
const TABLE: [Status; 11] = [
    Status::Command(0),
    Status::Signalled(0),
    Status::Busy(Status::BUSY_DEFAULT),
    Status::LockLost,
    Status::Superseded,
    Status::Cancelled,
    Status::Usage,
    Status::Unavailable,
    Status::Internal,
    Status::NotExecutable,
    Status::NotFound,
];

impl Status {
    /// `--conflict-exit-code`'s default.
    pub const BUSY_DEFAULT: u8 = 75;

    /// The number the process exits with.
    pub fn code(self) -> u8 {
        match self {
            Status::Command(code) | Status::Busy(code) => code,
            Status::Done => 0,
            Status::Free | Status::Incomplete => 1,
            Status::Signalled(n) => 128_i32.saturating_add(n).clamp(0, 255) as u8,
            Status::LockLost => 79,
            Status::Superseded => 80,
            Status::Cancelled => 81,
            Status::Usage => 64,
            Status::Unavailable => 69,
            Status::Internal => 70,
            Status::NotExecutable => 126,
            Status::NotFound => 127,
            Status::Check(check) => match check {
                Check::Ok => 0,
                Check::Warning => 1,
                Check::Critical => 2,
                Check::Unknown => 3,
            },
        }
    }

    /// The status column of the table.
    fn label(self) -> String {
        match self {
            Status::Command(_) => "the command's own".into(),
            Status::Signalled(_) => "128+N".into(),
            other => other.code().to_string(),
        }
    }

    /// The meaning column of the table, a line per line shown.
    fn meaning(self) -> &'static [&'static str] {
        match self {
            Status::Command(_) => &["when it ran and exited"],
            Status::Signalled(_) => {
                &["the command, or dlock while waiting, was killed by signal N"]
            }
            Status::Busy(_) => &[
                "the lock is busy (--no-wait) or --wait expired",
                "(see --conflict-exit-code)",
            ],
            Status::LockLost => &[
                "the lock was lost while the command ran; the command",
                "was terminated",
            ],
            Status::Superseded => &[
                "--supersede: a newer --supersede run started waiting",
                "for the same names; this one gave up its wait",
            ],
            Status::Cancelled => &[
                "--cancel-in-progress: a newer run with the option",
                "cancelled this one; the command was terminated",
            ],
            Status::Usage => &[
                "usage error: bad option, name, duration or URL, missing",
                "`--`, or one from a DLOCK_* variable; or a nested run",
                "asks exclusively for a lock its own parent dlock holds",
                "shared or with --limit",
            ],
            Status::Unavailable => &[
                "backend unavailable: server unreachable, authentication",
                "failed, lock directory unusable",
            ],
            Status::Internal => &["internal error"],
            Status::NotExecutable => &["the command is not executable"],
            Status::NotFound => &["the command was not found"],
            Status::Done => &["status: held; release: released"],
            Status::Free => &["status: free; release: nothing held"],
            Status::Incomplete => &["list --runs: stopped at its most names"],
            Status::Check(_) => &["status --ran-within: 0 ok, 1 too long ago, 2 never, 3 unknown"],
        }
    }
}

/// The exit-status table as `--help` and the man page show it.
pub fn help_table() -> String {
    // "the command's own" and two spaces; with the meanings, every line fits 80 columns.
    const LABEL_WIDTH: usize = 19;
    // The widest line of the paragraph below, its leading newline counted.
    const WIDTH: usize = 79;
    let mut text = String::from("Exit status:");
    for status in TABLE {
        let mut lines = status.meaning().iter();
        let first = lines.next().copied().unwrap_or_default();
        text.push_str(&format!("\n  {:<LABEL_WIDTH$}{first}", status.label()));
        for line in lines {
            text.push_str(&format!("\n  {:LABEL_WIDTH$}{line}", ""));
        }
    }
    // The other subcommands' statuses, filled to the width of the table's rows.
    let mut line = String::from("\n ");
    for word in subcommand_statuses().split(' ') {
        if line.len() + 1 + word.len() > WIDTH {
            text.push_str(&line);
            line = String::from("\n ");
        }
        line.push(' ');
        line.push_str(word);
    }
    text.push_str(&line);
    text
}

/// The statuses in one line, for `-h` (`--help` has the table).
pub fn short_table() -> String {
    format!(
        "Exit status: the command's own, or {} busy, {} lost, {} usage, {} unavailable",
        Status::BUSY_DEFAULT,
        Status::LockLost.code(),
        Status::Usage.code(),
        Status::Unavailable.code(),
    )
}

/// The table's rows for the man page: the status and its meaning as one paragraph (man fills it).
pub fn rows() -> Vec<(String, String)> {
    TABLE
        .iter()
        .map(|status| (status.label(), status.meaning().join(" ")))
        .collect()
}

/// The statuses of the subcommands other than `run`, as one paragraph.
pub fn subcommand_statuses() -> String {
    format!(
        "status: {} held, {} free; with --ran-within {} ran within, {} too long ago, {} never \
         succeeded, {} unknown. release --force: {} released, {} nothing held. hold: {} held \
         ({} busy, as run). release: {} released, {} no hold of this shell's, {} the hold had \
         lost its lock. list --runs: {} stopped at its most names.",
        Status::Done.code(),
        Status::Free.code(),
        Status::Check(Check::Ok).code(),
        Status::Check(Check::Warning).code(),
        Status::Check(Check::Critical).code(),
        Status::Check(Check::Unknown).code(),
        Status::Done.code(),
        Status::Free.code(),
        Status::Done.code(),
        Status::BUSY_DEFAULT,
        Status::Done.code(),
        Status::Free.code(),
        Status::LockLost.code(),
        Status::Incomplete.code(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's table lists the statuses `--help` shows, in the same order.
    #[test]
    fn readme_and_help_list_the_same_exit_statuses() {
        let readme = include_str!("../../../README.md");
        let section = readme
            .split("\n## Exit status\n")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("README has an Exit status section");
        let in_readme: Vec<&str> = section
            .lines()
            .filter_map(|line| line.strip_prefix("| ")?.split(" |").next())
            .filter(|label| *label != "status")
            .collect();
        let in_help: Vec<String> = TABLE.iter().map(|s| s.label()).collect();
        assert_eq!(in_readme, in_help);
        let subcommands = format!(
            "`status`: {} held, {} free. `release --force`: {} released, {} nothing was held.",
            Status::Done.code(),
            Status::Free.code(),
            Status::Done.code(),
            Status::Free.code()
        );
        assert!(section.contains(&subcommands), "{subcommands}");
    }

    #[test]
    fn every_row_of_the_help_table_shows_its_code() {
        let table = help_table();
        for status in TABLE {
            let row = format!("\n  {:<19}{}", status.label(), status.meaning()[0]);
            assert!(table.contains(&row), "{row}");
        }
        assert_eq!(Status::Signalled(9).code(), 137);
        assert_eq!(Status::Signalled(i32::MAX).code(), 255);
    }
}

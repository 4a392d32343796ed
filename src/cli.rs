//! The command line, declared once with clap: the one source for parsing, `--help`, the shell
//! completions and the man pages. Parsing ends in plain values (`Command`) the rest of dlock uses.

mod config;
mod duration;
mod help;
mod in_force;
mod one_subcommand;
mod place;
mod plan;
mod resolve;
mod trusted;
mod urls;
mod usage;
mod values;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, FromArgMatches, Parser, Subcommand, ValueHint};

use crate::backend::{BackendConfig, BackendKind, StoreConfig};
use crate::exit::Status;
use crate::report::Verbosity;

use duration::{parse_connect_timeout, parse_duration, parse_ttl};
use help::{after_help, after_long_help, DESCRIPTION, RUN_DESCRIPTION, RUN_USAGE};
use one_subcommand::matches;
pub use plan::lock_name;
pub use usage::quote;
use values::{parse_seats, parse_switch};

/// Run a command while holding a named lock: flock(1) for a whole cluster.
#[derive(Parser, Debug)]
// `-h` is each option's first paragraph, `--help` all of it; neither is wider than 80 columns,
// piped (clap's default is 100) or on a wider terminal.
#[command(name = "dlock", version = crate::backend::version(), about, long_about = DESCRIPTION,
          max_term_width = 80)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes (before or after it), shown apart in each `--help`.
#[derive(Args, Debug)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    #[arg(
        short,
        long,
        global = true,
        help = "Where locks live (default: file)",
        long_help = crate::backend::backend_help(),
        value_parser = crate::backend::KindParser,
        env = "DLOCK_BACKEND",
        default_value = "file"
    )]
    pub backend: BackendKind,

    #[arg(
        short,
        long = "url",
        global = true,
        help = "The backend's address (--help: the forms)",
        long_help = crate::backend::url_help(),
        env = "DLOCK_URL",
        value_name = "URL"
    )]
    pub urls: Vec<String>,

    /// Read the servers' password from a file.
    ///
    /// From its first line, for every URL that has none (after its user name, if it has one), so that no password is
    /// on a command line. The file
    /// must be yours or root's, and neither writable by others nor readable by every user.
    #[arg(long, global = true, env = "DLOCK_PASSWORD_FILE", value_name = "PATH",
          value_hint = ValueHint::FilePath)]
    pub password_file: Option<PathBuf>,

    /// Give up reaching a server after this.
    ///
    /// How long to try to reach a server before giving up with exit status 69 (at least 100ms).
    #[arg(long, global = true, env = "DLOCK_CONNECT_TIMEOUT", value_name = "DURATION",
          value_parser = parse_connect_timeout, default_value = "5s", allow_hyphen_values = true,
          value_hint = ValueHint::Other)]
    pub connect_timeout: Duration,

    /// As root: trust USER's lock files too.
    ///
    /// The file backend run by root uses only lock directories (and the directories above them)
    /// and lock files that belong to root and that no other user may write; this trusts USER's too
    /// (a name or a uid; repeat it or separate users with commas). Ignored unless dlock runs as root.
    // Root only, and rare: in --help, not in -h, which fits a screen.
    #[arg(long = "trust-owner", global = true, env = "DLOCK_TRUST_OWNER", value_name = "USER",
          hide_short_help = true,
          value_parser = dlock_file::uid_of, value_delimiter = ',',
          value_hint = ValueHint::Username)]
    pub trust_owners: Vec<u32>,

    /// Redis: replicas that must acknowledge.
    ///
    /// Wait until N replicas of the master acknowledged each acquisition and renewal (WAIT) before the command starts or the lease counts as renewed, so a failover keeps
    /// the lock. For every Redis URL that does not say it itself with ?replicas=N (the URL's wins).
    #[arg(
        long,
        global = true,
        env = "DLOCK_REPLICAS",
        value_name = "N",
        default_value_t = 0,
        value_hint = ValueHint::Other
    )]
    pub replicas: u32,

    /// Print timestamped events on stderr.
    ///
    /// Waiting and for whom, acquired, renewed, lost, exited.
    #[arg(short, long, global = true, conflicts_with = "quiet")]
    pub verbose: bool,

    /// Print nothing but errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// The variables that name this place for a dlock the command runs (see `place`).
    #[arg(skip)]
    pub place: Vec<(String, String)>,

    /// The configuration files read, least specific first, for `-v` to name.
    #[arg(skip)]
    pub config_files: Vec<PathBuf>,

    /// The servers came from the parent dlock's DLOCK_URL, which left out the password typed into
    /// its --url: a refusal says so.
    #[arg(skip)]
    pub parent_password_withheld: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run COMMAND while holding the lock.
    #[command(long_about = RUN_DESCRIPTION, override_usage = RUN_USAGE)]
    Run(RunArgs),
    /// Show who holds a lock. Exit status 0 when held, 1 when free.
    ///
    /// Then the last run (who, when, how it ended) and the last success, where the store keeps
    /// them; with --ran-within, a check of the last success instead (its own exit statuses).
    Status(StatusArgs),
    /// List every lock currently held.
    ///
    /// With --runs, every lock whose store keeps a last run, held or free: how each last ran
    /// (and last succeeded), in the words of `status`.
    List(ListArgs),
    /// Hold the lock for the rest of the calling shell script.
    ///
    /// Return once it is held, leaving a keeper that renews it until the script's shell exits or
    /// runs `dlock release NAME`.
    ///
    /// flock(1)'s "lock the rest of this script" for the cluster: `dlock hold -n deploy || exit 1`.
    /// With the lock's variables: `v=$(dlock hold --print-env -n deploy) || exit 1; eval "$v"`
    /// (never `eval "$(dlock hold ...)"`: eval of nothing succeeds, so it goes on without the lock).
    /// If the lock is lost, or the keeper ends without releasing it, the shell gets SIGTERM. A
    /// parent that is not a shell (timeout, sudo, xargs) is refused (64) without
    /// --owner.
    Hold(HoldArgs),
    /// Give up what this shell took with `dlock hold` (--force: anyone's).
    ///
    /// With --force, break a lock for whoever holds it (for an operator cleaning up after a dead
    /// holder).
    Release(ReleaseArgs),
    /// Show the settings in force and where each came from.
    ///
    /// One line per setting, `ORIGIN<TAB>key = value`: the configuration file and line, the
    /// DLOCK_* variable or the option that gives it, as `git config --list --show-origin` shows
    /// git's; passwords left out. The backend is always shown (`default` when none is set).
    Config(ConfigArgs),
    /// Write the man pages and shell completions into --out DIR
    ///
    /// The man pages into DIR/man and the bash, zsh and fish completions into DIR/completions,
    /// for the backends this dlock was built with.
    Generate(GenerateArgs),
}

/// How `run` and `hold` take their locks and keep them: the options the two share.
#[derive(Args, Debug, Clone)]
pub struct LockArgs {
    /// Take the lock exclusively (the default).
    ///
    /// The default; flock's -e works too.
    #[arg(short = 'x', short_alias = 'e', long, group = "mode")]
    pub exclusive: bool,

    /// Take the lock shared.
    ///
    /// Shared holders run together, never alongside an exclusive one.
    #[arg(short, long, group = "mode")]
    pub shared: bool,

    /// Take one of N seats (a semaphore).
    ///
    /// At most N holders with --limit at once.
    #[arg(short, long, group = "mode", value_name = "N",
          value_parser = parse_seats, value_hint = ValueHint::Other)]
    pub limit: Option<u32>,

    /// Lock NAME's ancestors shared too.
    ///
    /// Lock every ancestor shared and the path itself exclusively (or shared, with --shared).
    #[arg(short, long, conflicts_with = "limit")]
    pub tree: bool,

    /// Fail at once if the lock is busy.
    ///
    /// flock's --nonblock and --nb work too. On the command line it overrides DLOCK_WAIT.
    #[arg(short, long, aliases = ["nonblock", "nb"], env = "DLOCK_NO_WAIT",
          value_parser = parse_switch, overrides_with = "no_wait")]
    pub no_wait: bool,

    /// Give up after waiting this long.
    ///
    /// Seconds (120, 0.5; 0 is --no-wait) or with a unit (500ms, 30s, 5m), at most a year
    /// (flock's --timeout works too). Default: wait without limit. On the command line it
    /// overrides DLOCK_NO_WAIT.
    #[arg(short, long, alias = "timeout", env = "DLOCK_WAIT", value_name = "DURATION",
          value_parser = parse_duration, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub wait: Option<Duration>,

    /// In a log, report the wait this often.
    ///
    /// While waiting with stderr not a terminal (a CI log), say every this often how long it has
    /// waited and how much of --wait is left (0: only the first line, when the wait starts).
    #[arg(long, env = "DLOCK_PROGRESS_EVERY", value_name = "DURATION", value_parser = parse_duration,
          default_value = crate::supervise::progress::EVERY_DEFAULT, allow_hyphen_values = true,
          value_hint = ValueHint::Other, hide_short_help = true)]
    pub progress_every: Duration,

    /// Exit status when the lock is busy.
    ///
    /// The exit status when the lock could not be acquired.
    #[arg(short = 'E', long, env = "DLOCK_CONFLICT_EXIT_CODE", value_name = "N", default_value_t = Status::BUSY_DEFAULT, value_hint = ValueHint::Other)]
    pub conflict_exit_code: u8,

    /// Keep the lock at least this long.
    ///
    /// Judged by the lock store's clock, even once the command ended (dlock exits at once with its status) or dlock
    /// died: other runs see it busy until then. Same forms as --wait, at most a year; 0 is none.
    /// `dlock release --force` ends it early.
    #[arg(long, env = "DLOCK_MIN_HOLD", value_name = "DURATION", value_parser = parse_duration,
          allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub min_hold: Option<Duration>,

    /// The lease, on network backends.
    ///
    /// How long the lock outlives a dlock that stops renewing it: 100ms to a year (24 days on zk).
    #[arg(long, env = "DLOCK_TTL", value_name = "DURATION", value_parser = parse_ttl,
          default_value = "15s", allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub ttl: Duration,

    /// Say who holds the lock and why.
    ///
    /// For `status`, `list` and anyone waiting (`deploy v1.4 by
    /// $CI_JOB_URL`): at most 256 bytes of printable text (no control characters such as a
    /// newline, tab or escape; refused, not escaped). Kept with the holder record until release.
    #[arg(long, env = "DLOCK_MESSAGE", value_name = "TEXT", value_hint = ValueHint::Other)]
    pub message: Option<String>,

    /// The lock's name (several: all or nothing).
    ///
    /// 1 to 512 bytes of printable UTF-8 (`/` allowed). Several names are taken
    /// all or nothing, in sorted order (so no two dlocks deadlock on the same set).
    #[arg(value_name = "NAME", required = true)]
    pub names: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub lock: LockArgs,

    /// On loss: SIGTERM, this long, SIGKILL.
    ///
    /// When the lock is lost: SIGTERM the command's process group, wait this long, then SIGKILL.
    #[arg(long, env = "DLOCK_KILL_AFTER", value_name = "DURATION", value_parser = parse_duration,
          default_value = "10s", allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub kill_after: Duration,

    /// The command to run and its arguments, after `--`.
    #[arg(
        last = true,
        required_unless_present = "shell_command",
        value_name = "COMMAND",
        value_hint = ValueHint::CommandWithArguments
    )]
    pub command: Vec<String>,

    /// Free a --min-hold lock if the command fails.
    ///
    /// Keep the lock for --min-hold only if the command succeeded (exit 0); any other end (a
    /// failure, a signal, a lost lock) gives the lock up at once, so that the next run anywhere
    /// tries again. Without --min-hold the lock is given up at the end anyway: it changes nothing.
    #[arg(long, env = "DLOCK_RELEASE_ON_FAILURE", value_parser = parse_switch)]
    pub release_on_failure: bool,

    /// Give up when a newer --supersede run waits.
    ///
    /// At most one --supersede waiter per set of names: one that starts waiting later makes
    /// this one give up at once with exit status 80, naming the run that replaced it (host, pid,
    /// --message). Waiters without it are not touched. From the command line or the
    /// environment only, never a configuration file.
    #[arg(long, env = "DLOCK_SUPERSEDE", value_parser = parse_switch)]
    pub supersede: bool,

    /// Cancel a holder that says it too.
    ///
    /// A holder that also said --cancel-in-progress is asked to end: its command gets SIGTERM
    /// (SIGKILL after --kill-after), its dlock exits with 81 and records who cancelled it, and
    /// this run takes the lock before the other dlock waiters. A holder without it is waited
    /// for as usual. From the command line or the environment only, never a configuration file.
    #[arg(long, env = "DLOCK_CANCEL_IN_PROGRESS", value_parser = parse_switch)]
    pub cancel_in_progress: bool,

    /// flock's -o/--close, accepted and ignored: the command never gets the lock's descriptor.
    #[arg(short = 'o', long = "close", hide = true)]
    pub close: bool,

    /// A shell command instead of -- COMMAND.
    ///
    /// Run this one string with `$SHELL -c` instead of a COMMAND after `--` (/bin/sh when SHELL is unset or empty), as flock -c does: `-c 'make && make install'`.
    #[arg(short = 'c', long = "command", value_name = "SHELL_COMMAND",
          value_hint = ValueHint::CommandString)]
    pub shell_command: Option<String>,
}

#[derive(Args, Debug)]
pub struct HoldArgs {
    #[command(flatten)]
    pub lock: LockArgs,
    /// Print the lock's variables for eval.
    ///
    /// As `export NAME='value'` lines, for
    /// `v=$(dlock hold --print-env NAME) || exit 1; eval "$v"`. Without it nothing is printed.
    #[arg(long)]
    pub print_env: bool,
    /// Hold for process PID (`--owner $$`).
    ///
    /// Keep the hold for process PID, an ancestor of dlock, instead of the shell
    /// that runs `dlock hold`: for when a program that is not a shell (timeout, sudo, xargs) runs it.
    #[arg(long, value_name = "PID")]
    pub owner: Option<u32>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The lock's name, as `run` and `hold` take it.
    pub name: String,
    /// Print JSON.
    ///
    /// Name, held, location, holders (mode, host, pid, owner, since, token, message,
    /// expires_at: the lease's end by the server's clock, null without a lease; kept_until: until
    /// when --min-hold keeps the lock, null without one), waiters (in
    /// line, first first; empty where the backend keeps no line), last_run and last_success
    /// (host, pid, owner, token, message, acquired, ended, ending, exit_code and signal as numbers,
    /// running; null when none).
    #[arg(long, conflicts_with = "ran_within")]
    pub json: bool,
    /// Check that the last success ended within DURATION.
    ///
    /// For a monitoring check: one line, `OK: NAME last succeeded 3h 12m ago on HOST`, and the
    /// exit status monitoring plugins use: 0 within DURATION, 1 longer ago (WARNING), 2 no
    /// success on record (CRITICAL), 3 the store unreachable or its records unreadable
    /// (UNKNOWN). Same forms as --wait, at most a year.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub ran_within: Option<Duration>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only locks whose name starts with PREFIX.
    #[arg(default_value = "")]
    pub prefix: String,
    /// Print a JSON array of what `status --json` prints, one per held lock.
    #[arg(long)]
    pub json: bool,
    /// Every lock with a last run on record, a line each: NAME, a tab, held or free, its last
    /// run, and its last success when that is another run (--json: name, held, last_run,
    /// last_success).
    #[arg(long)]
    pub runs: bool,
}

#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// Break the lock for whoever holds it, instead of giving up this shell's `dlock hold`.
    #[arg(long)]
    pub force: bool,
    /// The lock's name, as `hold` took it.
    pub name: String,
}

#[derive(Args, Debug)]
pub struct ConfigArgs {
    /// The settings in force, settled with the command line (see `in_force`).
    #[arg(skip)]
    pub settings: Vec<in_force::Setting>,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// The directory to write man/ and completions/ into (created if missing).
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
    pub out: PathBuf,
}

/// The clap command, for completions and man pages.
/// The whole command line, as help, man pages and completions show it.
pub fn command() -> clap::Command {
    with_help_endings(parsing_command())
}

/// The command line a run parses: without the ends of its help (the exit statuses, which take
/// about a tenth of a run's start to format), which only a help shows (`parse` then makes them).
fn parsing_command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// dlock's and run's help end with the exit statuses and where to read on.
fn with_help_endings(command: clap::Command) -> clap::Command {
    command
        .after_help(after_help())
        .after_long_help(after_long_help())
        .mut_subcommands(|sub| {
            if sub.get_name() == "run" {
                sub.after_help(after_help())
                    .after_long_help(after_long_help())
            } else {
                sub
            }
        })
}

impl GlobalArgs {
    pub fn verbosity(&self) -> Verbosity {
        match (self.verbose, self.quiet) {
            (true, _) => Verbosity::Verbose,
            (_, true) => Verbosity::Quiet,
            _ => Verbosity::Normal,
        }
    }

    pub fn backend_config(&self) -> BackendConfig {
        BackendConfig {
            kind: self.backend,
            store: StoreConfig {
                urls: self.urls.clone(),
                connect_timeout: self.connect_timeout,
                create: false,
                replicas: self.replicas,
                stop: Default::default(),
                trust_owners: self.trust_owners.clone(),
            },
        }
    }
}

/// Parses the command line and settles what clap cannot (see `resolve`). Help and version print
/// and exit 0; any other problem prints one line naming it (and the DLOCK_* variable, when one is
/// the cause) and exits with the usage status, 64 (clap's own default would be 2).
pub fn parse() -> Result<Cli, Status> {
    use clap::error::ErrorKind;
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let configured =
        config::Config::load().and_then(|config| Ok((matches(&config, &args)?, config)));
    let (parsed, config) = match configured {
        Ok(both) => both,
        Err(line) => {
            eprintln!("dlock: {line}");
            return Err(Status::Usage);
        }
    };
    let settle = |matches: clap::ArgMatches| match Cli::from_arg_matches(&matches) {
        Ok(mut cli) => resolve::resolve(&mut cli, &matches, &config).map(|()| {
            cli.global.config_files = config.paths().map(Into::into).collect();
            cli
        }),
        Err(e) => Err(usage::one_line(&e)),
    };
    let refused = match parsed {
        Ok(matches) => match settle(matches) {
            Ok(cli) => return Ok(cli),
            Err(line) => line,
        },
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            // The same parse on the whole command (`-h`: in brief) shows the help.
            let whole = if asks_long_help(&args) {
                self::command()
            } else {
                brief(self::command())
            };
            let shown = match config.apply(whole).map(|c| c.try_get_matches_from(&args)) {
                Ok(Err(help)) if help.kind() == e.kind() => help,
                _ => e,
            };
            let _ = shown.print();
            return Err(
                if shown.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    Status::Usage
                } else {
                    Status::Done
                },
            );
        }
        Err(e) => match without_overridden_wait(&config, &args) {
            Some(matches) => match settle(matches) {
                Ok(cli) => return Ok(cli),
                Err(line) => line,
            },
            None => usage::explain(&e, &args, &config),
        },
    };
    eprintln!("dlock: {refused}");
    Err(Status::Usage)
}

/// The command line parsed again without what DLOCK_WAIT and DLOCK_NO_WAIT (or the file's `wait`
/// and `no-wait`) say, when it gives -n or -w itself: an overridden variable is not read, so a
/// bad value in it is no error. `None` when the command line gives neither, or still fails.
fn without_overridden_wait(
    config: &config::Config,
    args: &[std::ffi::OsString],
) -> Option<clap::ArgMatches> {
    use clap::parser::ValueSource::CommandLine;
    let unread = |sub: clap::Command| {
        sub.mut_arg("wait", |arg| arg.env(None).default_value(None))
            .mut_arg("no_wait", |arg| arg.env(None).default_value("false"))
    };
    let command = config
        .apply(self::command())
        .ok()?
        .mut_subcommand("run", unread)
        .mut_subcommand("hold", unread);
    let matches = command.try_get_matches_from(args).ok()?;
    let (_, sub) = matches.subcommand()?;
    let typed = |id: &str| sub.value_source(id) == Some(CommandLine);
    (typed("wait") || typed("no_wait")).then_some(matches)
}

/// Whether the help asked for is `--help` (or `dlock help ...`), the long one: clap shows the
/// long help for those and the short one for `-h`.
fn asks_long_help(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|arg| *arg != "--")
        .any(|arg| arg == "--help" || arg == "help")
}

/// The command as `-h` shows it: each option's first line without its variable, default and
/// values (`--help` has them), so that it fits a screen.
fn brief(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| {
            if arg.get_action().takes_values() {
                arg.hide_env(true)
                    .hide_default_value(true)
                    .hide_possible_values(true)
            } else {
                arg.hide_env(true)
            }
        })
        .mut_subcommands(brief)
}

#[cfg(test)]
mod tests {
    #[test]
    fn clap_definition_is_consistent() {
        super::command().debug_assert();
    }
}

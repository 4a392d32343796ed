//! The command line, declared once with clap: the one source for parsing, `--help`, the shell
//! completions and the man pages. Parsing ends in plain values (`Command`) the rest of dlock uses.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::backend::{BackendConfig, BackendKind};
use crate::exit::{FailWith, Failure};
use crate::lock::{new_owner_id, tree_locks, LockName, LockRequest, Mode};
use crate::report::Verbosity;
use crate::supervise::RunPlan;

const EXIT_CODES: &str = "\
Exit status:
  the command's own     when it ran and exited
  128+N                 the command, or dlock while waiting, was killed by signal N
  75                    the lock is busy (--no-wait) or --wait expired (see --conflict-exit-code)
  79                    the lock was lost while the command ran; the command was terminated
  64                    usage error: bad option, name, duration or URL, missing `--`;
                        or a nested run asks exclusively for a lock its own parent dlock
                        holds shared or with --limit
  69                    backend unavailable: server unreachable, authentication failed,
                        lock directory unusable
  70                    internal error
  126                   the command is not executable
  127                   the command was not found
  status: 0 held, 1 free.  release: 0 released, 1 nothing held.";

/// `--help` and the man page: the exit codes, then how each network backend keeps its locks.
fn after_long_help() -> String {
    format!("{EXIT_CODES}\n\n{}", crate::backend::redis::HELP)
}

/// Run a command while holding a named lock: flock(1) for a whole cluster.
#[derive(Parser, Debug)]
#[command(name = "dlock", version, about, after_help = EXIT_CODES,
          after_long_help = after_long_help(), max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug)]
pub struct GlobalArgs {
    /// Where locks live: lock files on this machine, Redis, or ZooKeeper.
    #[arg(
        short,
        long,
        global = true,
        value_enum,
        env = "DLOCK_BACKEND",
        default_value = "file"
    )]
    pub backend: BackendKind,

    /// The backend's address: a directory (or file:///dir) for file, redis://[user:password@]host:port[/db]
    /// (give it 3, 5, ... times for Redlock), zk://[user:password@]host:port,host:port[/chroot],
    /// etcd://[user:password@]host:port,host:port (etcds:// for TLS).
    #[arg(
        short,
        long = "url",
        global = true,
        env = "DLOCK_URL",
        value_name = "URL"
    )]
    pub urls: Vec<String>,

    /// How long to try to reach a server before giving up with exit status 69.
    #[arg(long, global = true, env = "DLOCK_CONNECT_TIMEOUT", value_name = "DURATION",
          value_parser = parse_duration, default_value = "5s")]
    pub connect_timeout: Duration,

    /// Print timestamped events on stderr: waiting and for whom, acquired, renewed, lost, exited.
    #[arg(short, long, global = true, conflicts_with = "quiet")]
    pub verbose: bool,

    /// Print nothing but errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Acquire the lock, run COMMAND while holding it, release it when COMMAND exits.
    Run(RunArgs),
    /// Show who holds a lock. Exit status 0 when held, 1 when free.
    Status(StatusArgs),
    /// List every lock currently held.
    List(ListArgs),
    /// Break a lock held by others (for an operator cleaning up after a dead holder).
    Release(ReleaseArgs),
    /// Write shell completions and man pages.
    #[command(hide = true)]
    Generate(GenerateArgs),
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Take the lock exclusively (the default).
    #[arg(short = 'x', long, group = "mode")]
    pub exclusive: bool,

    /// Take the lock shared: shared holders run together, never alongside an exclusive one.
    #[arg(short, long, group = "mode")]
    pub shared: bool,

    /// Take one of N seats: at most N holders with --limit at once (a semaphore).
    #[arg(short, long, group = "mode", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,

    /// Treat each NAME as a path in a hierarchy: lock every ancestor shared and the path itself
    /// exclusively (or shared, with --shared).
    #[arg(short, long, conflicts_with = "limit")]
    pub tree: bool,

    /// Fail at once if the lock is busy.
    #[arg(short, long, conflicts_with = "wait")]
    pub no_wait: bool,

    /// Give up after waiting this long (500ms, 30s, 5m). Default: wait without limit.
    #[arg(short, long, env = "DLOCK_WAIT", value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,

    /// Exit status when the lock could not be acquired.
    #[arg(short = 'E', long, env = "DLOCK_CONFLICT_EXIT_CODE", value_name = "N", default_value_t = crate::exit::BUSY)]
    pub conflict_exit_code: u8,

    /// The lease: how long the lock outlives a dlock that stops renewing it (network backends).
    #[arg(long, env = "DLOCK_TTL", value_name = "DURATION", value_parser = parse_ttl, default_value = "15s")]
    pub ttl: Duration,

    /// When the lock is lost: SIGTERM the command's process group, wait this long, then SIGKILL.
    #[arg(long, env = "DLOCK_KILL_AFTER", value_name = "DURATION", value_parser = parse_duration,
          default_value = "10s")]
    pub kill_after: Duration,

    /// The lock's name: 1 to 512 bytes of printable UTF-8 (`/` allowed). Several names are taken
    /// all or nothing, in sorted order (so no two dlocks deadlock on the same set).
    #[arg(value_name = "NAME", required = true)]
    pub names: Vec<String>,

    /// The command to run and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    pub name: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only locks whose name starts with PREFIX.
    #[arg(default_value = "")]
    pub prefix: String,
    /// Print a JSON array.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// Required: breaking someone else's lock is never the default.
    #[arg(long)]
    pub force: bool,
    pub name: String,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// Directory to write completions/ and man/ into.
    #[arg(long)]
    pub out: PathBuf,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (use e.g. 500ms, 30s, 5m)"))
}

/// The longest lease: 24 days, the largest whole number of days a ZooKeeper session timeout (a
/// signed 32-bit count of milliseconds, at most 24.8 days) can carry. Redis counts leases in
/// milliseconds too, in the scripts' doubles, and is exact far beyond it. A lease this long already
/// keeps a lock from others for weeks after its holder died; dlock renews every ttl/3, so no run
/// needs a longer one.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 24 * 3600);

fn parse_ttl(s: &str) -> Result<Duration, String> {
    let ttl = parse_duration(s)?;
    if ttl < Duration::from_millis(100) {
        return Err("the ttl must be at least 100ms".into());
    }
    if ttl > MAX_TTL {
        return Err(format!(
            "the ttl must be at most {} (ZooKeeper counts a session timeout in a 32-bit number of \
             milliseconds)",
            humantime::format_duration(MAX_TTL)
        ));
    }
    Ok(ttl)
}

/// The clap command, for completions and man pages.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
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
            urls: self.urls.clone(),
            connect_timeout: self.connect_timeout,
            create: false,
        }
    }
}

/// A name from the command line, or a usage error naming what is wrong with it.
pub fn lock_name(raw: &str) -> anyhow::Result<LockName> {
    LockName::new(raw).fail_with(Failure::Usage)
}

impl RunArgs {
    pub fn mode(&self) -> Mode {
        match (self.shared, self.limit) {
            (true, _) => Mode::Shared,
            (_, Some(n)) => Mode::Limit(n),
            _ => Mode::Exclusive,
        }
    }

    /// The plain plan the supervisor runs: names validated, expanded for --tree, deduplicated
    /// (keeping the strongest mode asked for a name) and put in canonical, sorted order, so two
    /// dlocks asking for the same set in different orders cannot deadlock.
    pub fn plan(&self, global: &GlobalArgs) -> anyhow::Result<RunPlan> {
        let owner = new_owner_id()?;
        let mut wanted: Vec<(LockName, Mode)> = Vec::new();
        for raw in &self.names {
            if self.tree {
                wanted.extend(tree_locks(raw, self.mode()).fail_with(Failure::Usage)?);
            } else {
                wanted.push((lock_name(raw)?, self.mode()));
            }
        }
        // Exclusive sorts after shared for one name, so the last of each run is the strongest.
        wanted.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then((a.1 == Mode::Exclusive).cmp(&(b.1 == Mode::Exclusive)))
        });
        wanted.reverse();
        wanted.dedup_by(|a, b| a.0 == b.0);
        wanted.reverse();
        let requests = wanted
            .into_iter()
            .map(|(name, mode)| LockRequest {
                name,
                mode,
                ttl: self.ttl,
                owner: owner.clone(),
            })
            .collect();
        Ok(RunPlan {
            backend: BackendConfig {
                create: true,
                ..global.backend_config()
            },
            requests,
            command: self.command.clone(),
            no_wait: self.no_wait,
            wait: self.wait,
            conflict_exit_code: self.conflict_exit_code,
            kill_after: self.kill_after,
        })
    }
}

/// Parses the command line. Help and version print and exit 0; any other problem prints one line
/// naming it and exits with the usage status, 64 (clap's own default would be 2).
pub fn parse() -> Result<Cli, u8> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) => {
            use clap::error::ErrorKind;
            match e.kind() {
                ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = e.print();
                    Err(
                        if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                            crate::exit::USAGE
                        } else {
                            0
                        },
                    )
                }
                _ => {
                    eprintln!("dlock: {}", one_line(&e));
                    Err(crate::exit::USAGE)
                }
            }
        }
    }
}

/// clap's message without its usage block and hints, folded onto one line.
fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let body = text.split("\n\n").next().unwrap_or(&text);
    let body = body.strip_prefix("error: ").unwrap_or(body);
    let folded = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if e.kind() == clap::error::ErrorKind::MissingRequiredArgument && folded.contains("<COMMAND>") {
        return "missing `--` and the command to run: dlock run NAME -- COMMAND [ARGS...]".into();
    }
    folded
}

#[cfg(test)]
mod tests {
    #[test]
    fn clap_definition_is_consistent() {
        super::command().debug_assert();
    }

    proptest::proptest! {
        /// Durations from the command line: parsed or refused, never a panic.
        #[test]
        fn any_duration_text_parses_or_is_refused(text in "\\PC{0,30}|[0-9]{1,25}(ns|us|ms|s|m|h|d|y)") {
            let _ = super::parse_duration(&text);
            if let Ok(ttl) = super::parse_ttl(&text) {
                proptest::prop_assert!(ttl <= super::MAX_TTL);
                // What the backends make of it stays in range: Redis milliseconds, ZooKeeper's i32.
                proptest::prop_assert!(i32::try_from(ttl.as_millis()).is_ok());
            }
        }
    }
}

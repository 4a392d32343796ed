//! What clap's definition cannot say, settled once it has parsed: an option on the command line
//! beats the environment, and the environment the configuration file, also where the two
//! contradict each other (`-n` against DLOCK_WAIT, `--url DIR` against DLOCK_BACKEND=redis), as a
//! fleet-wide default must not break a command that says otherwise; several servers in one
//! DLOCK_URL or --url; the password file; and `-c` is one whole shell command, as flock(1) has it.

use super::in_force::{self, Origins};
use clap::parser::ValueSource::{CommandLine, DefaultValue, EnvVariable};
use std::time::Duration;

use clap::ArgMatches;

use super::config::Config;
use super::{urls, usage::quote, Cli, Command, GlobalArgs, LockArgs, RunArgs};
use crate::backend::{kind_named, BackendKind};

/// Settles `cli`, which clap parsed into `matches`; or the one line saying what is wrong.
pub fn resolve(cli: &mut Cli, matches: &ArgMatches, config: &Config) -> Result<(), String> {
    // Several servers in one value, from DLOCK_URL or from `-u 'redis://a:1,redis://b:2'` alike
    // (the file's are split as it is read).
    cli.global.urls = cli
        .global
        .urls
        .iter()
        .flat_map(|u| urls::split(u))
        .collect();
    let origins = backend_and_url(&mut cli.global, matches, config)?;
    if let Command::Config(shown) = &mut cli.command {
        shown.settings = in_force::settings(&cli.global, matches, config, &origins);
    }
    not_built(&cli.global)?;
    super::place::settle(&mut cli.global, matches);
    password(&mut cli.global)?;
    // DLOCK_REPLICAS set fleet-wide for Redis: not an error for a command on another backend.
    if !cli.global.backend.descriptor().replicas
        && matches.value_source("replicas") == Some(EnvVariable)
    {
        cli.global.replicas = 0;
    }
    // The subcommand given (the command parsed may have no other: `subcommand_matches` of
    // another would be a programming error to clap).
    let Some((_, sub)) = matches.subcommand() else {
        return Ok(());
    };
    match &mut cli.command {
        Command::Run(run) => {
            lock_options(&mut run.lock, sub, cli.global.backend, config)?;
            shell_command(run, sub)?;
        }
        Command::Hold(hold) => lock_options(&mut hold.lock, sub, cli.global.backend, config)?,
        _ => {}
    }
    Ok(())
}

/// What `run` and `hold` share (`LockArgs`).
fn lock_options(
    lock: &mut LockArgs,
    matches: &ArgMatches,
    backend: BackendKind,
    config: &Config,
) -> Result<(), String> {
    wait_or_not(&mut lock.no_wait, &mut lock.wait, matches, config)?;
    message(lock, matches, config)?;
    ttl_for(backend, lock.ttl, matches, config)
}

/// A `--ttl` longer than the backend can keep (ZooKeeper: 24 days), refused naming where it came
/// from, the backend and its limit. Also from DLOCK_TTL or the file: a lease shorter than asked
/// would let the lock go while its holder still runs.
fn ttl_for(
    backend: BackendKind,
    ttl: Duration,
    matches: &ArgMatches,
    config: &Config,
) -> Result<(), String> {
    let Some(why) = backend.refuses_ttl(ttl) else {
        return Ok(());
    };
    let given = match (matches.value_source("ttl"), config.value_for("DLOCK_TTL")) {
        (Some(EnvVariable), _) => "DLOCK_TTL".to_owned(),
        (Some(DefaultValue), Some((_, at))) => format!("ttl ({at})"),
        _ => "--ttl".to_owned(),
    };
    Err(format!("{given} {} is {why}", crate::text::duration(ttl)))
}

/// One level's say on where the locks are (the configuration files, the environment, the command
/// line): its backend and its servers, each with where it was given (`--backend`, `DLOCK_URL`,
/// `/etc/dlock/config line 2`).
struct Level {
    backend: Option<(BackendKind, String)>,
    urls: Option<(Vec<String>, String)>,
}

/// The backend and the servers, as a pair: from the most specific level that gives either, where
/// a URL brings the backend its scheme names (`-u redis://h:6379` needs no `-b redis`) and a
/// backend alone keeps the servers of the level below only if they are that backend's (`-b file`
/// with DLOCK_URL=redis://... uses the default lock directory; DLOCK_BACKEND=redis, which a parent
/// dlock sets for its command, keeps the files' Redis servers). A backend and a URL that disagree
/// on one level are refused naming both.
fn backend_and_url(
    global: &mut GlobalArgs,
    matches: &ArgMatches,
    config: &Config,
) -> Result<Origins, String> {
    let variable = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let typed = |id: &str| matches.value_source(id) == Some(CommandLine);
    let levels = [
        Level {
            backend: config
                .file_value("DLOCK_BACKEND")
                .and_then(|(value, at)| Some((kind_named(value)?, at))),
            urls: config
                .file_value("DLOCK_URL")
                .map(|(value, at)| (urls::split(value), at)),
        },
        Level {
            backend: variable("DLOCK_BACKEND")
                .and_then(|value| Some((kind_named(&value)?, "DLOCK_BACKEND".to_owned()))),
            urls: variable("DLOCK_URL").map(|value| (urls::split(&value), "DLOCK_URL".to_owned())),
        },
        Level {
            backend: typed("backend").then(|| (global.backend, "--backend".to_owned())),
            urls: typed("urls").then(|| (global.urls.clone(), "--url".to_owned())),
        },
    ];
    let mut kind = BackendKind::default();
    let mut origins = Origins {
        backend: "default".to_owned(),
        urls: None,
    };
    for level in levels {
        match (level.backend, level.urls) {
            (None, None) => {}
            (backend, Some((given, at))) => {
                let scheme = backend_named_by(&given, &at)?;
                (kind, origins.backend) = match (backend, scheme) {
                    (Some((b, b_at)), Some((s, url))) if b != s => {
                        return Err(format!(
                            "{b_at} {} does not fit {at} {}, a {} URL: the URL names its backend, \
                             so give one of them",
                            b.as_str(),
                            crate::url::redact(url),
                            s.as_str()
                        ))
                    }
                    (Some((b, b_at)), _) => (b, b_at),
                    (None, scheme) => (
                        scheme.map(|(s, _)| s).unwrap_or_default(),
                        format!("the scheme of {at}"),
                    ),
                };
                origins.urls = Some(at);
            }
            (Some((b, at)), None) => {
                if b != kind {
                    origins.urls = None;
                }
                kind = b;
                origins.backend = at;
            }
        }
    }
    global.backend = kind;
    if origins.urls.is_none() {
        global.urls.clear();
    }
    Ok(origins)
}

/// The backend the URLs name by their scheme (a path: the file backend), and the first URL that
/// names it; two backends named is an error.
fn backend_named_by<'a>(
    urls: &'a [String],
    at: &str,
) -> Result<Option<(BackendKind, &'a str)>, String> {
    let mut found: Option<(BackendKind, &str)> = None;
    for url in urls {
        let Some(kind) = crate::backend::kind_of_url(url) else {
            continue;
        };
        match found {
            Some((first, shown)) if first != kind => {
                return Err(format!(
                    "{at} names two backends: {} ({}) and {} ({})",
                    crate::url::redact(shown),
                    first.as_str(),
                    crate::url::redact(url),
                    kind.as_str()
                ))
            }
            Some(_) => {}
            None => found = Some((kind, url)),
        }
    }
    Ok(found)
}

/// A URL of a backend this build left out (`etcd://...` where the etcd feature was not built) is
/// refused naming the feature, as `-b etcd` is, rather than taken for a directory's name.
fn not_built(global: &GlobalArgs) -> Result<(), String> {
    let left_out = global
        .urls
        .iter()
        .filter_map(|url| crate::backend::by_scheme(url))
        .find(|descriptor| !descriptor.built());
    match left_out {
        Some(descriptor) => Err(crate::backend::not_built(descriptor)),
        None => Ok(()),
    }
}

/// The password file's password, put into every server URL that has none.
fn password(global: &mut GlobalArgs) -> Result<(), String> {
    let Some(path) = &global.password_file else {
        return Ok(());
    };
    if global.backend.descriptor().local {
        return Ok(());
    }
    let password = urls::read_password(path)?;
    let mut used = false;
    for url in &mut global.urls {
        if let Some(with) = crate::url::insert_password(url, &password)? {
            *url = with;
            used = true;
        }
    }
    // A refused password then names the file it came from (see `crate::url::credentials_hint`).
    if used {
        crate::url::password_from_file(path);
    }
    Ok(())
}

/// `--no-wait` and `--wait` exclude each other: the one given at the more specific level wins
/// (the command line, the environment, the user's configuration file, the system's); both at one
/// level is an error naming where.
fn wait_or_not(
    no_wait: &mut bool,
    wait: &mut Option<Duration>,
    matches: &ArgMatches,
    config: &Config,
) -> Result<(), String> {
    if !*no_wait || wait.is_none() {
        return Ok(());
    }
    let level = |id: &str, variable: &str| match matches.value_source(id) {
        Some(CommandLine) => usize::MAX,
        Some(EnvVariable) => usize::MAX - 1,
        _ => config.layer_of(variable),
    };
    let (n, w) = (
        level("no_wait", "DLOCK_NO_WAIT"),
        level("wait", "DLOCK_WAIT"),
    );
    if n > w {
        *wait = None;
        return Ok(());
    }
    if w > n {
        *no_wait = false;
        return Ok(());
    }
    Err(match n {
        usize::MAX => "--no-wait cannot be used with --wait: give one of them".into(),
        l if l == usize::MAX - 1 => {
            "DLOCK_NO_WAIT and DLOCK_WAIT are both set: unset one, or give -n or -w".into()
        }
        _ => {
            let at = |variable: &str| config.file_value(variable).map(|(_, at)| at);
            format!(
                "no-wait ({}) and wait ({}) are both set: remove one, or give -n or -w",
                at("DLOCK_NO_WAIT").unwrap_or_default(),
                at("DLOCK_WAIT").unwrap_or_default()
            )
        }
    })
}

/// `-c` takes the place of `-- COMMAND`, and (as in flock's `LOCK -c COMMAND`) nothing may follow
/// it when it comes after a lock name: `dlock run lock -c echo hi` would otherwise lock `hi` too and
/// run `echo` alone, where flock(1) refuses.
fn shell_command(run: &RunArgs, matches: &ArgMatches) -> Result<(), String> {
    let Some(script) = &run.shell_command else {
        return Ok(());
    };
    if !run.command.is_empty() {
        return Err(
            "-c runs one shell command instead of the COMMAND after `--`: give one of them".into(),
        );
    }
    let (Some(at), Some(indices)) = (
        matches.index_of("shell_command"),
        matches.indices_of("names"),
    ) else {
        return Ok(());
    };
    let names: Vec<(usize, &String)> = indices.zip(&run.lock.names).collect();
    let after: Vec<&str> = names
        .iter()
        .filter(|(i, _)| *i > at)
        .map(|(_, n)| n.as_str())
        .collect();
    if names.first().is_some_and(|(i, _)| *i < at) && !after.is_empty() {
        let shown = |s: &str| quote(s).unwrap_or_else(|| format!("{s:?}"));
        let whole = std::iter::once(script.as_str())
            .chain(after.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        return Err(format!(
            "`{}` after `-c {}` would be taken for a lock name: quote the whole shell command, as \
             in `-c {}`, or put every lock name before -c",
            shown(after[0]),
            shown(script),
            shown(&whole)
        ));
    }
    Ok(())
}

/// `--message` is shown to other users: refused (never escaped) unless it is printable text within
/// the limit. Checked here rather than by clap, which would print the refused text back raw.
fn message(lock: &LockArgs, matches: &ArgMatches, config: &Config) -> Result<(), String> {
    let Some(text) = &lock.message else {
        return Ok(());
    };
    let option = match (
        matches.value_source("message"),
        config.value_for("DLOCK_MESSAGE"),
    ) {
        (Some(EnvVariable), _) => "DLOCK_MESSAGE".to_owned(),
        (Some(DefaultValue), Some((_, at))) => format!("message ({at})"),
        _ => "--message".to_owned(),
    };
    crate::lock::check_message(text)
        .map(drop)
        .map_err(|why| format!("{option}: {why}"))
}

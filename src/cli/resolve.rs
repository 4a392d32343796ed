//! What clap's definition cannot say, settled once it has parsed: an option on the command line
//! beats the environment, and the environment the configuration file, also where the two
//! contradict each other (`-n` against DLOCK_WAIT, `--url DIR` against DLOCK_BACKEND=redis), as a
//! fleet-wide default must not break a command that says otherwise; several servers in one
//! DLOCK_URL or --url; the password file; and `-c` is one whole shell command, as flock(1) has it.

use clap::parser::ValueSource::{CommandLine, DefaultValue, EnvVariable};
use std::time::Duration;

use clap::ArgMatches;

use super::config::Config;
use super::{urls, usage::quote, Cli, Command, GlobalArgs, LockArgs, RunArgs};
use crate::backend::BackendKind;

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
    backend_and_url(&mut cli.global, matches, config);
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
    wait_or_not(&mut lock.no_wait, &mut lock.wait, matches)?;
    message(lock, matches)?;
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

/// A backend and a URL that do not go together, given at different levels (the command line,
/// the environment, the configuration file): the lower one's is dropped, as if unset. `-b file`
/// with DLOCK_URL=redis://... uses the default lock directory; `-u /srv/locks` with
/// DLOCK_BACKEND=redis (which a parent dlock sets for its command) the file backend.
fn backend_and_url(global: &mut GlobalArgs, matches: &ArgMatches, config: &Config) {
    let fit = global.urls.iter().all(|url| global.backend.takes(url));
    if fit {
        return;
    }
    let level = |id: &str, variable: &str| match matches.value_source(id) {
        Some(CommandLine) => 3,
        Some(EnvVariable) => 2,
        Some(DefaultValue) if config.value_for(variable).is_some() => 1,
        _ => 0,
    };
    let backend = level("backend", "DLOCK_BACKEND");
    let url = level("urls", "DLOCK_URL");
    if backend > url {
        global.urls.clear();
    } else if url > backend {
        // The default backend, as clap's definition has it.
        global.backend = BackendKind::default();
    }
}

/// A URL of a backend this build left out (`etcd://...` where the etcd feature was not built) is
/// refused naming the feature, as `-b etcd` is, rather than taken for a directory's name.
fn not_built(global: &GlobalArgs) -> Result<(), String> {
    let left_out = global
        .urls
        .iter()
        .filter_map(|url| crate::backend::by_scheme(url))
        .find(|descriptor| !descriptor.built);
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

/// `--no-wait` and `--wait` exclude each other: the one on the command line wins over the other
/// from the environment; both on the command line, or both in the environment, is an error.
fn wait_or_not(
    no_wait: &mut bool,
    wait: &mut Option<Duration>,
    matches: &ArgMatches,
) -> Result<(), String> {
    if !*no_wait || wait.is_none() {
        return Ok(());
    }
    match (
        matches.value_source("no_wait"),
        matches.value_source("wait"),
    ) {
        (Some(CommandLine), Some(CommandLine)) => {
            Err("--no-wait cannot be used with --wait: give one of them".into())
        }
        (Some(CommandLine), _) => {
            *wait = None;
            Ok(())
        }
        (_, Some(CommandLine)) => {
            *no_wait = false;
            Ok(())
        }
        _ => Err("DLOCK_NO_WAIT and DLOCK_WAIT are both set: unset one, or give -n or -w".into()),
    }
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
fn message(lock: &LockArgs, matches: &ArgMatches) -> Result<(), String> {
    let Some(text) = &lock.message else {
        return Ok(());
    };
    let option = match matches.value_source("message") {
        Some(EnvVariable) => "DLOCK_MESSAGE",
        _ => "--message",
    };
    crate::lock::check_message(text)
        .map(drop)
        .map_err(|why| format!("{option}: {why}"))
}

//! What each subcommand does once the command line is parsed: `run` hands over to the supervisor;
//! `status`, `list` and `release --force` ask the backend and print its answer for people or as
//! JSON; `hold` and `release` without `--force` are hold/'s.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::time::{Duration, SystemTime};

use anyhow::anyhow;

use crate::backend::{self, Backend, BackendConfig, LockStatus};
use crate::cli::{lock_name, Cli, Command, GlobalArgs};
use crate::exit::{Check, Status};
use crate::failure::message_of;
use crate::failure::{from_store, FromStore};
use crate::lock::group::GroupRecord;
use crate::lock::{LastRuns, LockName};
use crate::report::Reporter;
use crate::{generate, hold, last_runs, program, supervise};

pub fn run(cli: Cli, report: &Reporter) -> anyhow::Result<Status> {
    let global = &cli.global;
    match &cli.command {
        Command::Run(args) => {
            let plan = args.plan(global)?;
            args.lock.note_path_names(report);
            // The supervisor would refuse a SHELL that cannot run too, but not say where that
            // program came from.
            let from_shell = args.shell_command.is_some()
                && std::env::var_os("SHELL").is_some_and(|s| !s.is_empty());
            if let (true, Some(shell)) = (from_shell, plan.command.first()) {
                if let Err(why) = program::resolve(shell) {
                    let why_not = why.message(shell);
                    report.error(&format!("{why_not} (the shell for -c, from SHELL)"));
                    return Ok(why.status());
                }
            }
            supervise::run(plan, hold::nested::claims, report)
        }
        Command::Status(args) => {
            let name = lock_name(&args.name)?;
            if let Some(within) = args.ran_within {
                return Ok(ran_within(&name, within, global, report));
            }
            let backend = open_backend(&global.backend_config(), report)?;
            let status = backend.status(&name).or_store()?;
            // Records that cannot be read leave the answer about the holders, and its exit
            // status, as they are: an error line on stderr says why they are missing.
            let runs = backend
                .last_runs(&name)
                .map_err(|e| report.error(&last_runs_unread(&name, e)))
                .unwrap_or_default();
            let group = group_of(backend.as_ref(), &name);
            if args.json {
                let mut json = status_json(&status, &runs);
                // Only where a group record is: otherwise a lock's object is the one `list` shows.
                if let Some(group) = &group {
                    json["group"] = serde_json::to_value(group)?;
                }
                emit(&format!("{}\n", serde_json::to_string_pretty(&json)?))?;
            } else if !global.quiet {
                let mut text = status_text(&status);
                if let Some(group) = &group {
                    let owners: Vec<&str> =
                        status.holders.iter().map(|h| h.owner.as_str()).collect();
                    text.push_str(&group.lines(&owners));
                }
                text.push_str(&last_runs::lines(&runs, &status.holders, SystemTime::now()));
                emit(&text)?;
            }
            Ok(if status.holders.is_empty() {
                Status::Free
            } else {
                Status::Done
            })
        }
        Command::List(args) => {
            let backend = open_backend(&global.backend_config(), report)?;
            if args.runs {
                return list_runs(backend.as_ref(), &args.prefix, args.json, report);
            }
            let listing = backend.list(&args.prefix).or_store()?;
            // Entries that are not locks do not hide the others: each gets a line on stderr (so
            // the JSON on stdout keeps its shape) and the exit status stays 0.
            for unreadable in &listing.unreadable {
                report.error(&format!("skipped: {unreadable}"));
            }
            let held = listing.held;
            let mut text = String::new();
            if args.json {
                // Each lock's last runs; one error line for all that cannot be read (a backend
                // that keeps none would say the same for each).
                let mut told = false;
                let mut runs_of = |name: &LockName| {
                    backend.last_runs(name).unwrap_or_else(|e| {
                        if !std::mem::replace(&mut told, true) {
                            report.error(&last_runs_unread(name, e));
                        }
                        LastRuns::default()
                    })
                };
                let all: Vec<_> = held
                    .iter()
                    .map(|status| status_json(status, &runs_of(&status.name)))
                    .collect();
                text = format!("{}\n", serde_json::to_string_pretty(&all)?);
            } else {
                for status in &held {
                    for holder in &status.holders {
                        let _ = writeln!(text, "{}\t{}", status.name, holder.describe());
                    }
                }
            }
            emit(&text)?;
            Ok(Status::Done)
        }
        Command::Release(args) => {
            let name = lock_name(&args.name)?;
            if !args.force {
                return hold::release::release(&name, &global.backend_config(), report);
            }
            let removed = open_backend(&global.backend_config(), report)?
                .force_release(&name)
                .or_store()?;
            if removed.is_empty() {
                report.notice(&format!(
                    "lock {:?} was not held; nothing released",
                    name.as_str()
                ));
                return Ok(Status::Free);
            }
            let mut text = String::new();
            for holder in &removed {
                let _ = writeln!(text, "released {}\t{}", name, holder.describe());
            }
            // The exit status says it was released; -q asks for nothing else.
            if !global.quiet {
                emit(&text)?;
            }
            Ok(Status::Done)
        }
        Command::Hold(args) => hold::hold(&cli, args, report),
        Command::Config(args) => {
            let text: String = args.settings.iter().map(|s| s.line()).collect();
            emit(&text)?;
            Ok(Status::Done)
        }
        Command::Generate(args) => {
            generate::write_all(&args.out)?;
            if !global.quiet {
                emit(&generate::written(&args.out))?;
            }
            Ok(Status::Done)
        }
    }
}

fn open_backend(config: &BackendConfig, report: &Reporter) -> anyhow::Result<Box<dyn Backend>> {
    let backend = backend::open(config)?;
    report.event(&format!("using {}", backend.location()));
    Ok(backend)
}

/// `list --runs`: every lock with records under `prefix`, a line each or a JSON array. The held
/// locks' holders tell a run that is running from one that never ended.
fn list_runs(
    backend: &dyn Backend,
    prefix: &str,
    json: bool,
    report: &Reporter,
) -> anyhow::Result<Status> {
    let crate::backend::RunsFound { runs: found, cut } = backend.list_runs(prefix).or_store()?;
    let listing = backend.list(prefix).or_store()?;
    for unreadable in &listing.unreadable {
        report.error(&format!("skipped: {unreadable}"));
    }
    let holders: std::collections::BTreeMap<&LockName, &[crate::lock::Holder]> = listing
        .held
        .iter()
        .map(|status| (&status.name, status.holders.as_slice()))
        .collect();
    let holders_of = |name: &LockName| holders.get(name).copied().unwrap_or_default();
    let text = if json {
        let all: Vec<_> = found
            .iter()
            .map(|(name, runs)| {
                let (last_run, last_success) = last_runs::json(runs, holders_of(name));
                serde_json::json!({
                    "name": name,
                    "held": !holders_of(name).is_empty(),
                    "last_run": last_run,
                    "last_success": last_success,
                })
            })
            .collect();
        format!("{}\n", serde_json::to_string_pretty(&all)?)
    } else {
        let now = SystemTime::now();
        let mut text = String::new();
        for (name, runs) in &found {
            let line = last_runs::line(name.as_str(), runs, holders_of(name), now);
            let _ = writeln!(text, "{line}");
        }
        text
    };
    emit(&text)?;
    if cut {
        report.error(&format!(
            "list --runs stopped after the first {} names in order; give a longer prefix to \
             see the rest",
            crate::backend::MAX_LISTED_RUNS
        ));
        return Ok(Status::Incomplete);
    }
    Ok(Status::Done)
}

fn status_json(status: &LockStatus, runs: &LastRuns) -> serde_json::Value {
    let (last_run, last_success) = last_runs::json(runs, &status.holders);
    serde_json::json!({
        "name": status.name,
        "held": !status.holders.is_empty(),
        "location": status.location,
        "holders": status.holders,
        // A backend that keeps no line of waiters has none to show: an array all the same.
        "waiters": status.waiters.as_deref().unwrap_or_default(),
        "last_run": last_run,
        "last_success": last_success,
    })
}

/// The lock's concurrency group record (`run --supersede`, `--cancel-in-progress`), where the
/// store keeps one and it says anything; one that cannot be read is none.
fn group_of(backend: &dyn Backend, name: &LockName) -> Option<GroupRecord> {
    let text = backend.groups()?.read(name).ok()??;
    GroupRecord::read(&text).filter(|record| !record.is_empty())
}

fn last_runs_unread(name: &LockName, e: dlock_core::error::Error) -> String {
    format!(
        "cannot read the last runs of lock {:?}: {}",
        name.as_str(),
        message_of(&from_store(e))
    )
}

/// `status NAME --ran-within WITHIN`: one line for a monitoring system, and its exit status (see
/// `last_runs::check`); a store that cannot be asked is UNKNOWN, not 69.
fn ran_within(name: &LockName, within: Duration, global: &GlobalArgs, report: &Reporter) -> Status {
    let asked = open_backend(&global.backend_config(), report).and_then(|backend| {
        let holders = backend.status(name).or_store()?.holders;
        Ok((backend.last_runs(name).or_store()?, holders))
    });
    let (check, line) = match asked {
        Ok((runs, holders)) => {
            last_runs::check(name.as_str(), &runs, &holders, within, SystemTime::now())
        }
        Err(e) => (
            Check::Unknown,
            format!("{}: {name}: {}", Check::Unknown.word(), message_of(&e)),
        ),
    };
    if !global.quiet {
        if let Err(e) = emit(&format!("{line}\n")) {
            report.error(&message_of(&e));
        }
    }
    Status::Check(check)
}

/// `status` for people: a line for the lock, then each holder and waiter on a line that fits a
/// screen (who, since when, its lease, its owner id in short), what may be long (why it is kept,
/// its message) indented below it.
fn status_text(status: &LockStatus) -> String {
    if status.holders.is_empty() {
        return format!("{}: free ({})\n", status.name, status.location);
    }
    let now = SystemTime::now();
    let mut text = format!("{}: held ({})\n", status.name, status.location);
    let waiters = status
        .waiters
        .iter()
        .flatten()
        .map(|w| ("waiting: ", w.as_holder()));
    let holders = status.holders.iter().map(|h| ("", h.clone()));
    for (what, holder) in holders.chain(waiters) {
        let (first, rest) = holder.describe_apart(now);
        let owner = crate::lock::short_owner(&holder.owner);
        let _ = writeln!(text, "  {what}{first}, owner {owner}");
        for part in rest {
            let _ = writeln!(text, "    {part}");
        }
    }
    text
}

/// Writes `text` to standard output. A reader that went away (`dlock status X | true`) ends the
/// output quietly, as in ripgrep: no message, and the exit status stays the command's own.
fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            let why = crate::report::plain(&e);
            Err(anyhow!("cannot write to standard output: {why}"))
        }
        _ => Ok(()),
    }
}

//! What each subcommand does once the command line is parsed: `run` hands over to the supervisor;
//! `status`, `list` and `release --force` ask the backend and print its answer for people or as
//! JSON; `hold` and `release` without `--force` are hold/'s.

use std::fmt::Write as _;
use std::io::{self, Write as _};

use anyhow::anyhow;

use crate::backend::{self, Backend, BackendConfig, LockStatus};
use crate::cli::{lock_name, Cli, Command};
use crate::exit::Status;
use crate::report::Reporter;
use crate::{generate, hold, program, supervise};

pub fn run(cli: Cli, report: &Reporter) -> anyhow::Result<Status> {
    let global = &cli.global;
    match &cli.command {
        Command::Run(args) => {
            let plan = args.plan(global)?;
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
            supervise::run(plan, report)
        }
        Command::Status(args) => {
            let name = lock_name(&args.name)?;
            let status = open_backend(&global.backend_config(), report)?.status(&name)?;
            if args.json {
                emit(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&status_json(&status))?
                ))?;
            } else if !global.quiet {
                emit(&status_text(&status))?;
            }
            Ok(if status.holders.is_empty() {
                Status::Free
            } else {
                Status::Done
            })
        }
        Command::List(args) => {
            let listing = open_backend(&global.backend_config(), report)?.list(&args.prefix)?;
            // Entries that are not locks do not hide the others: each gets a line on stderr (so
            // the JSON on stdout keeps its shape) and the exit status stays 0.
            for unreadable in &listing.unreadable {
                report.error(&format!("skipped: {unreadable}"));
            }
            let held = listing.held;
            let mut text = String::new();
            if args.json {
                let all: Vec<_> = held.iter().map(status_json).collect();
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
            let removed = open_backend(&global.backend_config(), report)?.force_release(&name)?;
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
        Command::Generate(args) => {
            generate::write_all(&args.out)?;
            Ok(Status::Done)
        }
    }
}

fn open_backend(config: &BackendConfig, report: &Reporter) -> anyhow::Result<Box<dyn Backend>> {
    let backend = backend::open(config)?;
    report.event(&format!("using {}", backend.location()));
    Ok(backend)
}

fn status_json(status: &LockStatus) -> serde_json::Value {
    serde_json::json!({
        "name": status.name,
        "held": !status.holders.is_empty(),
        "location": status.location,
        "holders": status.holders,
        "waiters": status.waiters,
    })
}

fn status_text(status: &LockStatus) -> String {
    if status.holders.is_empty() {
        return format!("{}: free ({})\n", status.name, status.location);
    }
    let mut text = format!("{}: held ({})\n", status.name, status.location);
    for holder in &status.holders {
        let _ = writeln!(text, "  {}, owner {}", holder.describe(), holder.owner);
    }
    for waiter in status.waiters.iter().flatten() {
        let _ = writeln!(
            text,
            "  waiting: {}, owner {}",
            waiter.describe(),
            waiter.owner
        );
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

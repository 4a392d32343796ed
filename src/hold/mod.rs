//! `dlock hold NAME` and `dlock release NAME`: flock(1)'s "lock the rest of this script", for the
//! cluster. `dlock hold` (the front, this file) finds the shell to hold for (owner.rs), starts a
//! keeper (itself again, with `KEEPER_VAR` naming that shell and the front) and returns once the
//! keeper holds the locks, printing their variables as shell for `eval` only with `--print-env`:
//! the documented forms (`dlock hold NAME || exit 1`, `v=$(dlock hold --print-env NAME) || exit 1`)
//! rest on the exit status alone, so that a dlock that fails or dies never lets the script on. The
//! keeper (keeper.rs) takes the locks with the supervisor's code, then
//! detaches and renews them until the shell exits (watched with a pidfd, so SIGKILL counts too) or
//! `dlock release NAME` asks from the shell or one of its descendants (release.rs), finding the
//! keeper through a private registry of sockets (registry.rs).
//!
//! The front stays the keeper's parent while it acquires: Ctrl-C reaches both (one process group),
//! and the keeper dies with the front (PR_SET_PDEATHSIG), so a `dlock hold` that is stopped while it
//! waits leaves nothing behind, as `run` does.

mod keeper;
pub mod nested;
mod owner;
mod registry;
pub mod release;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use anyhow::{anyhow, Context};

use crate::cli::{Cli, HoldArgs};
use crate::exit::Status;
use crate::failure::{FailWith, Failure};
use crate::report::Reporter;
use registry::Process;

/// What the keeper writes first on its standard output (the front's pipe) once it holds the
/// locks; the variables follow.
const HELD: &str = "held\n";

/// Set by the front on the keeper it starts: `SHELL_PID.SHELL_START/FRONT_PID`. Not an option, so
/// `--help` and the completions do not offer it; the front's pid makes one copied into another
/// environment inert (the keeper's parent must be that front). The file backend reads it in a
/// keeper's environment to tell its flock(2) lock from another program's.
use crate::lock::acting_for::KEEPER_VAR;

/// `dlock hold`: as the front, or as the keeper the front started.
pub fn hold(cli: &Cli, args: &HoldArgs, report: &Reporter) -> anyhow::Result<Status> {
    if let Some(shell) = keeper_of() {
        return keeper::run(shell, args, &cli.global, report);
    }
    // Usage errors before anything is started.
    let plan = args.plan(&cli.global)?;
    args.lock.note_path_names(report);
    let shell = owner::find(args.owner, report)?;
    let dir = registry::dir(false)?;
    let place = registry::place(&plan.backend);
    for request in &plan.requests {
        // A second hold of a lock this shell holds would wait for itself. (The keeper checks
        // again, also for one still being taken: see keeper.rs's claims.)
        if UnixStream::connect(registry::entry(&dir, shell, &place, &request.name)).is_ok() {
            return Err(anyhow!(
                "this shell already holds lock {:?} with dlock hold; `dlock release {}` first",
                request.name.as_str(),
                request.name.as_str()
            ))
            .fail_with(Failure::Usage);
        }
    }
    let exe =
        std::env::current_exe().context("cannot find dlock's own program to start the keeper")?;
    #[allow(clippy::disallowed_methods)] // dlock's own program, as the keeper.
    let mut keeper = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(
            KEEPER_VAR,
            format!("{}/{}", shell.text(), std::process::id()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the keeper process")?;
    // The keeper writes once it holds the locks, then closes its end; or it ends without a word.
    let mut said = Vec::new();
    if let Some(mut out) = keeper.stdout.take() {
        let _ = out.read_to_end(&mut said);
    }
    if let Some(vars) = said.strip_prefix(HELD.as_bytes()) {
        if !args.print_env {
            return Ok(Status::Done);
        }
        let mut out = std::io::stdout().lock();
        // A reader gone away (`dlock hold x >&-`) changes nothing: the lock is held.
        let _ = out.write_all(vars).and_then(|()| out.flush());
        return Ok(Status::Done);
    }
    let status = keeper
        .wait()
        .context("cannot wait for the keeper process")?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => Status::Command(code.clamp(0, 255) as u8),
        (None, Some(n)) => Status::Signalled(n),
        (None, None) => Status::Internal,
    })
}

/// Whether this process is a keeper a front started (its output goes to the front).
pub fn is_keeper() -> bool {
    keeper_of().is_some()
}

/// The shell to keep a hold for, when this process is a keeper its parent, a front, started.
fn keeper_of() -> Option<Process> {
    let value = std::env::var(KEEPER_VAR).ok()?;
    let (shell, front) = value.split_once('/')?;
    let parent = rustix::process::getppid()?.as_raw_pid().unsigned_abs();
    (front.parse::<u32>().ok()? == parent).then_some(Process::parse(shell)?)
}

/// `export NAME='value'` lines, as `eval` in a POSIX shell and `source` in fish read them.
fn shell_lines(env: &[(String, String)]) -> String {
    env.iter()
        .map(|(k, v)| format!("export {k}={}\n", shell_word(v)))
        .collect()
}

/// Whether this is a `dlock hold --print-env` whose output a shell evals (not the keeper it
/// starts, whose output is the front's): from `cli` once parsed, else from the words before `--`.
pub fn asks_print_env(cli: Option<&Cli>) -> bool {
    if is_keeper() {
        return false;
    }
    match cli {
        Some(cli) => matches!(&cli.command, crate::cli::Command::Hold(hold) if hold.print_env),
        None => {
            let words: Vec<std::ffi::OsString> = std::env::args_os()
                .skip(1)
                .take_while(|arg| arg != "--")
                .collect();
            words.iter().any(|w| w == "hold") && words.iter().any(|w| w == "--print-env")
        }
    }
}

/// `value` single-quoted so that POSIX shells and fish read it back unchanged: fish takes `\'` and
/// `\\` as escapes inside single quotes, POSIX shells take nothing there, so every `'` and `\` is
/// written outside the quotes, escaped (`\'`, `\\`), which both read alike.
fn shell_word(value: &str) -> String {
    let mut out = String::from("'");
    for c in value.chars() {
        match c {
            '\'' | '\\' => {
                out.push('\'');
                out.push('\\');
                out.push(c);
                out.push('\'');
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_are_single_quoted_for_eval() {
        let env = vec![
            ("DLOCK_NAME".to_owned(), r"it's $x\".to_owned()),
            ("DLOCK_TOKEN".to_owned(), "7".to_owned()),
        ];
        assert_eq!(
            super::shell_lines(&env),
            "export DLOCK_NAME='it'\\''s $x'\\\\''\nexport DLOCK_TOKEN='7'\n"
        );
    }
}

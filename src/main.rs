//! dlock: run a command while holding a named lock, on this machine or across a cluster.
//! `main` only parses, runs and turns the outcome into an exit status; the work is in the modules.

#![forbid(unsafe_code)]
// dlock's `main` is the C entry point itself (dlock-sys's `c_main!`): Rust's start would read
// /proc/self/maps at every run (see crates/sys/src/start.rs). Tests keep the harness's own.
#![cfg_attr(not(test), no_main)]

mod backend;
mod cli;
mod commands;
mod completions;
mod failure;
mod generate;
mod hold;
mod manual;
mod program;
mod reentry;
mod supervise;
/// The programs the tests run, from the list scripts/test installs (shared with tests/).
#[cfg(test)]
#[path = "../tests/support/programs.rs"]
mod test_programs;

// The layers below, under the names the modules here use: the lock vocabulary, the contract's
// words and statuses (dlock-core), and the Linux primitives (dlock-sys).
use dlock_core::{exit, last_runs, lock, report, text, url};
use dlock_sys::{guard, job, signal, sync};

#[cfg(not(test))]
dlock_sys::c_main!(run);

/// Parses, runs, and says how it ended: the exit status.
#[cfg_attr(test, allow(dead_code))]
fn run() -> u8 {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(status) => return for_eval(status.code(), hold::asks_print_env(None)),
    };
    let report = report::Reporter::new(cli.global.verbosity());
    for path in &cli.global.config_files {
        report.event(&format!("read configuration file {}", path.display()));
    }
    let password_withheld = cli.global.parent_password_withheld;
    let print_env = hold::asks_print_env(Some(&cli));
    let code = match commands::run(cli, &report) {
        Ok(status) => status.code(),
        Err(err) => {
            let status = failure::status_of(&err);
            let mut message = failure::message_of(&err);
            // The servers a parent dlock passed on, without the password typed into its --url: a
            // refusal (or, where a user needs a password, the URL refused) would otherwise read as
            // a wrong password or a malformed URL.
            let refused = status == exit::Status::Unavailable
                || (status == exit::Status::Usage && message.contains("URL"));
            if password_withheld && refused {
                message.push_str(
                    " (the parent dlock's password was given in --url and is not passed on: \
                     use --password-file)",
                );
            }
            report.error(&message);
            status.code()
        }
    };
    for_eval(code, print_env)
}

/// `code`, having printed `exit CODE` on standard output for a failed `dlock hold --print-env`,
/// whose output exists to be eval'ed: `eval "$(dlock hold --print-env NAME)"` then ends the script
/// with the status, where the empty output of a failure would let it run on without the lock.
#[cfg_attr(test, allow(dead_code))]
fn for_eval(code: u8, print_env: bool) -> u8 {
    if print_env && code != 0 {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "exit {code}").and_then(|()| out.flush());
    }
    code
}

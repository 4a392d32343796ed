//! dlock: run a command while holding a named lock, on this machine or across a cluster.
//! `main` only parses, runs and turns the outcome into an exit status; the work is in the modules.

mod backend;
mod cli;
mod commands;
mod exit;
mod generate;
mod guard;
mod hold;
mod job;
mod lock;
mod program;
mod reentry;
mod report;
mod signal;
mod supervise;
mod url;

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(code) => return ExitCode::from(code),
    };
    let report = report::Reporter::new(cli.global.verbosity());
    match commands::run(cli, &report) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            report.error(&exit::message_of(&err));
            ExitCode::from(exit::code_of(&err))
        }
    }
}

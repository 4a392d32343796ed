//! dlock: run a command while holding a named lock, on this machine or across a cluster.
//! `main` only parses, runs and turns the outcome into an exit status; the work is in the modules.

// What the network backends share (outage reports, host lists, the stop while connecting) is dead
// code in a build that leaves all of them, or the ones using a part, out (`--no-default-features`);
// the default build, every backend, is the one checked for dead code.
#![cfg_attr(not(feature = "default"), allow(dead_code, unused_imports))]
// `unsafe` only in the modules that allow it below, each for a call no safe crate offers.
#![deny(unsafe_code)]
// dlock's `main` is the C entry point itself: Rust's start would read /proc/self/maps at every
// run (see start.rs). Tests keep the harness's own.
#![cfg_attr(not(test), no_main)]

// Linux system calls throughout, with no cheap portable fallback: clone(2) for the command and the
// guardian, open file description locks, /proc, a parent-death signal, thread-directed timers.
#[cfg(not(target_os = "linux"))]
compile_error!(
    "dlock runs on Linux only: it starts the command with clone(2), locks files with open file \
     description locks, reads /proc and asks the kernel for a parent-death signal"
);

mod backend;
mod cli;
mod commands;
mod completions;
mod exit;
mod generate;
// clone(2) with a stack of its own for the guardian, and raw descriptors in it.
#[allow(unsafe_code)]
mod guard;
mod hold;
mod job;
mod last_runs;
mod lock;
mod manual;
mod program;
mod reentry;
mod report;
/// The programs the tests run, from the list scripts/test installs (shared with tests/).
#[cfg(test)]
#[path = "../tests/support/programs.rs"]
mod test_programs;
// Signal masks, handlers, sigwaitinfo, pthread_kill and thread-directed timers: libc only.
#[allow(unsafe_code)]
mod signal;
// poll(2) and open(2) on the standard descriptors before anything else.
#[allow(unsafe_code)]
#[cfg(not(test))]
mod start;
mod supervise;
mod sync;
mod text;
mod url;

/// The C entry point: what Rust's start would do that dlock needs, then `run`.
#[cfg(not(test))]
// A C `main` must keep its name.
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    start::standard_descriptors();
    signal::ignore_broken_pipes();
    let status = run();
    start::flush_stdout();
    status.into()
}

/// Parses, runs, and says how it ended: the exit status.
#[cfg_attr(test, allow(dead_code))]
fn run() -> u8 {
    // Before any backend blocks or starts a thread: what backends need of signal/, handed over
    // so that no backend imports it (see backend/blocking.rs).
    backend::blocking::provide(backend::blocking::Provided {
        alarm_at: |deadline| {
            signal::interrupt::Alarm::at(deadline).map(|a| Box::new(a) as Box<dyn std::any::Any>)
        },
        wake_blocked: || Box::new(signal::mask::WakeBlocked::on_this_thread()),
        block_all: signal::mask::block_all_in_this_thread,
        all_blocked: || {
            signal::mask::Masked::blocking_all()
                .ok()
                .map(|m| Box::new(m) as Box<dyn std::any::Any>)
        },
    });
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
            let status = exit::status_of(&err);
            let mut message = exit::message_of(&err);
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

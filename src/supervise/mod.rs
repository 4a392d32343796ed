//! `dlock run`, whatever the backend: wait for the locks (cancellable by a deadline or a signal),
//! start the command in its own process group, forward signals to it, renew the leases, terminate
//! the command when a lock is lost, and turn the outcome into an exit status. Backends only
//! acquire, renew and release; everything about the child happens here.
//!
//! One thread decides everything. Signals are never handled asynchronously once the locks are
//! held: they are blocked from the start and taken one at a time by the main thread, in the same
//! loop that watches deadlines, renewals and the child (see signal/mod.rs for the whole contract).
//!
//! Files: `acquire` takes the locks (a wait here, or first tries and then a wait on a helper
//! thread), `child` runs the command and waits for its end (`spawn` starts it), `heartbeat` renews
//! and releases the leases, `environment` is what the command receives, `group` is `--supersede`
//! and `--cancel-in-progress`; this file is the plan and the overall flow.

mod acquire;
mod child;
mod environment;
mod group;
mod heartbeat;
pub mod progress;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;

use self::acquire::{try_in_order, wait_here, wait_on_helper, Acquisition, FirstTry};
pub use self::group::Group;
use self::heartbeat::release_quietly;
pub use self::heartbeat::Held;
pub(crate) use self::heartbeat::{next_renewal, release_all, renew_due};
use crate::backend::{self, BackendConfig};
use crate::exit::Status;
use crate::guard::Guardian;
use crate::lock::{LockName, LockRequest, RunEnd};
use crate::program;
use crate::reentry;
use crate::report::{self, Reporter};
use crate::signal::interrupt::{self, Interruptible};
use crate::signal::wait::Signals;
use crate::signal::FORWARDED;

/// Everything `dlock run` was asked to do.
pub struct RunPlan {
    pub backend: BackendConfig,
    /// The locks, already in canonical (sorted, deduplicated) order.
    pub requests: Vec<LockRequest>,
    pub command: Vec<String>,
    pub no_wait: bool,
    pub wait: Option<Duration>,
    pub conflict_exit_code: u8,
    pub kill_after: Duration,
    /// How often a wait says it still waits, in a log (`--progress-every`; zero: never).
    pub progress_every: Duration,
    /// The variables naming where the locks are, for a dlock the command runs (see
    /// `cli::place`): not for `hold`, whose script keeps its own environment.
    pub place: Vec<(String, String)>,
    /// `--release-on-failure`: a command that fails gives the lock up at once, whatever
    /// `--min-hold` says.
    pub release_on_failure: bool,
    /// `--supersede` and `--cancel-in-progress` (`run` only).
    pub group: Group,
}

/// The locks `dlock hold` took, for its keeper (src/hold/) to keep: the leases, the variables a
/// command would get, and the signals, still blocked.
pub struct Kept {
    pub held: Vec<Held>,
    pub env: Vec<(String, String)>,
    pub signals: Signals,
}

/// What a keeper does with the locks once held; its result is dlock's exit status.
pub type Keep<'a> = Box<dyn FnOnce(Kept) -> anyhow::Result<Status> + 'a>;

/// Where a run learns which of its locks the `dlock hold` keepers of its ancestor shells hold
/// (`hold::nested::claims`): given by the caller, as hold/ sits above supervise/ and uses it.
pub type HoldClaims = fn(&BackendConfig, &[&LockName]) -> Vec<reentry::Claim>;

/// `dlock run`: the exit status to end with (the command's, or dlock's own when it could not run
/// the command under the locks).
pub fn run(plan: RunPlan, holds: HoldClaims, report: &Reporter) -> anyhow::Result<Status> {
    // A command that cannot run is known before anything is opened or taken.
    match program::resolve(&plan.command[0]) {
        Ok(program) => take(plan, After::Run(program, holds), report),
        Err(cannot) => {
            report.error(&cannot.message(&plan.command[0]));
            Ok(cannot.status())
        }
    }
}

/// What follows taking the locks.
enum After<'a> {
    /// `run`: the command, as `program::resolve` found it, and where to ask for the claims of
    /// the holds around it.
    Run(PathBuf, HoldClaims),
    /// `hold`: the keeper.
    Keep(Keep<'a>),
}

/// `dlock hold`'s keeper: takes the locks as `run` does (waiting, signals, re-entrancy), then hands
/// them to `keep` instead of starting a command. Nothing to take (every lock is held by a parent
/// dlock) ends with 0 without calling `keep`.
pub fn hold(plan: RunPlan, keep: Keep<'_>, report: &Reporter) -> anyhow::Result<Status> {
    take(plan, After::Keep(keep), report)
}

fn take(plan: RunPlan, after: After<'_>, report: &Reporter) -> anyhow::Result<Status> {
    // First of all, before a backend may start threads of its own.
    let signals = Signals::block().context("cannot block signals")?;
    // Before the backend opens anything, so the guardian holds no copy of a lock file or a
    // connection (see guard.rs).
    let guardian = Guardian::start()
        .map_err(|e| anyhow::anyhow!("cannot start the guardian process: {}", report::plain(&e)))?;
    interrupt::install_wake_handler().context("cannot install a signal handler")?;
    // Until the locks are held a signal only means "stop", also in the middle of a connection
    // to a server that does not answer: it interrupts the call, and dlock ends with 128+N.
    let mut interruptible = Some(Interruptible::new(&FORWARDED).context("cannot unblock signals")?);
    let mut config = plan.backend.clone();
    // A connection being made gives up as soon as such a signal comes.
    config.store.stop = backend::stop::Stop::when(|| interrupt::caught().is_some());
    let backend = match backend::open(&config) {
        Ok(backend) => backend,
        Err(e) => return stopped(report).ok_or(e),
    };
    let location = backend.location();
    report.event(&format!("using {location}"));
    let mut claims = reentry::inherited();
    if let After::Run(_, holds) = after {
        // Inside a script that holds a lock with `dlock hold`, the hold covers the run.
        let names: Vec<&LockName> = plan.requests.iter().map(|r| &r.name).collect();
        claims.extend(holds(&plan.backend, &names));
    }
    let decision = reentry::decide(backend.as_ref(), &location, &plan.requests, claims)?;
    let requests = decision.to_acquire;
    if requests.is_empty() {
        guardian.dismiss();
        let After::Run(program, _) = after else {
            report.event("every lock is already held by a parent dlock; nothing to hold");
            return Ok(Status::Done);
        };
        report.event("every lock is already held by a parent dlock; running the command directly");
        return Ok(child::replace_with(&program, &plan.command, report));
    }

    let mut member = match group::Member::open(&config, &requests, plan.group) {
        Ok(member) => member,
        Err(e) => return stopped(report).ok_or(e),
    };
    if let Some(member) = member.as_mut() {
        member.enlist()?;
    }

    let file_limit = environment::raise_file_limit(requests.len());

    let started = Instant::now();
    let acquisition =
        if !plan.no_wait && requests.len() == 1 && !report.draws_waiting_line() && member.is_none()
        {
            // The common wait: one lock, nothing else to renew meanwhile, no status line to draw. The
            // backend makes its first attempt and waits on this thread: no helper thread to start,
            // and no hop between threads when the lock comes.
            match wait_here(backend.as_ref(), &requests[0], &plan, &signals, report) {
                Ok(acquisition) => acquisition,
                Err(e) => return stopped(report).ok_or(e),
            }
        } else {
            // First one attempt per lock on this thread: the uncontended case needs no helper thread.
            let mut held = Vec::new();
            match try_in_order(backend.as_ref(), &requests, &mut held, report) {
                Ok(FirstTry::AllHeld) => Acquisition::Held(held),
                Ok(FirstTry::Busy(busy, holders)) if plan.no_wait => {
                    release_quietly(held);
                    Acquisition::Busy(requests[busy].name.clone(), holders)
                }
                Ok(FirstTry::Busy(busy, _)) => {
                    // This loop takes signals itself (sigtimedwait): block them again first.
                    drop(interruptible.take());
                    if let Some(code) = stopped(report) {
                        release_quietly(held);
                        return Ok(code);
                    }
                    wait_on_helper(
                        backend,
                        &requests[busy..],
                        held,
                        &plan,
                        &signals,
                        member.as_mut(),
                        report,
                    )?
                }
                Ok(FirstTry::Lost(why)) => {
                    release_quietly(held);
                    Acquisition::Lost(why)
                }
                Err(e) => {
                    release_quietly(held);
                    return stopped(report).ok_or(e);
                }
            }
        };
    // Blocked again from here on: they are for the command now.
    drop(interruptible.take());
    let held = match acquisition {
        Acquisition::Held(held) => held,
        Acquisition::Busy(name, holders) => {
            report.notice(&acquire::busy_message(&name, &holders, None));
            return Ok(Status::Busy(plan.conflict_exit_code));
        }
        Acquisition::TimedOut(name, holders) => {
            report.notice(&acquire::busy_message(&name, &holders, plan.wait));
            return Ok(Status::Busy(plan.conflict_exit_code));
        }
        Acquisition::Signalled(n) => {
            report.event(&format!(
                "{} while waiting; giving up",
                crate::text::signal_name(n)
            ));
            return Ok(Status::Signalled(n));
        }
        Acquisition::Lost(why) => {
            report.error(&format!(
                "lost the lock while waiting for the others: {why}; nothing was run"
            ));
            return Ok(Status::LockLost);
        }
        Acquisition::Superseded(name, by) => {
            report.notice(&format!(
                "gave up waiting for lock {:?}: superseded by {}, a newer --supersede run",
                name.as_str(),
                by.describe()
            ));
            return Ok(Status::Superseded);
        }
    };
    if let Some(member) = member.as_mut() {
        member.acquired(signals.main_waker());
    }
    for h in &held {
        report.event(&format!(
            "acquired {:?} after {} with token {}",
            h.name.as_str(),
            crate::text::duration(started.elapsed()),
            h.lease.token()
        ));
    }
    // A signal that came while the last lock was being taken still means "stop": honour it now,
    // before anything was started.
    if let Some(code) = stopped(report) {
        release_all(held, &RunEnd::NOT_RUN, report);
        return Ok(code);
    }
    while let Some(n) = signals.wait(Duration::ZERO) {
        if FORWARDED.contains(&n) {
            release_all(held, &RunEnd::NOT_RUN, report);
            return Ok(Status::Signalled(n));
        }
    }

    let env = environment::for_command(&held, &plan, &location, &decision.passed_on);
    match after {
        After::Keep(keep) => keep(Kept { held, env, signals }),
        After::Run(program, _) => {
            let env = [env, plan.place.clone()].concat();
            let child = child::Child {
                program: &program,
                env: &env,
                file_limit,
            };
            child::supervise(held, child, &plan, &signals, member.as_mut(), report)
        }
    }
}

/// The exit status for a stop signal caught while connecting or acquiring, if one was.
fn stopped(report: &Reporter) -> Option<Status> {
    let n = interrupt::caught()?;
    report.event(&format!(
        "{} while acquiring; giving up",
        crate::text::signal_name(n)
    ));
    Some(Status::Signalled(n))
}

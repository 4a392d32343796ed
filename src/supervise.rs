//! `dlock run`, whatever the backend: wait for the locks (cancellable by a deadline or a signal),
//! start the command in its own process group, forward signals to it, renew the leases, terminate
//! the command when a lock is lost, and turn the outcome into an exit status. Backends only
//! acquire, renew and release; everything about the child happens here.
//!
//! One thread decides everything. Signals are never handled asynchronously: they are blocked from
//! the start and taken one at a time by the main thread with sigtimedwait(2), in the same loop that
//! watches deadlines, renewals and the child (SIGCHLD). A wait for a busy lock runs on a helper
//! thread, which reports over a channel and wakes the main thread with a signal of its own; but
//! the common wait (one lock, on a backend that polls its cancellation) runs on the main thread
//! itself, which then looks for signals whenever the backend looks at its cancellation.

use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::Context;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

use crate::backend::{
    self, Attempt, Backend, BackendConfig, Lease, Outage, Released, Renewal, Waiting,
};
use crate::exit;
use crate::guard::{self, Guardian};
use crate::job::{self, Job};
use crate::lock::{Holder, LockName, LockRequest};
use crate::program;
use crate::reentry::{self, Claim};
use crate::report::{self, Reporter};
use crate::signal::interrupt::{self, Interruptible};
use crate::signal::wait::Signals;
use crate::signal::FORWARDED;
use crate::spawn;

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
}

/// A lock this dlock holds.
struct Held {
    name: LockName,
    /// The acquisition's owner id, which a nested dlock looks for in the backend's records.
    owner: String,
    lease: Box<dyn Lease>,
    /// A third of the lease: when to renew first (as every backend renews); the lease then says.
    renew_every: Duration,
    /// When to renew next.
    due: Instant,
    /// When a renewal was last reported: a lease that checks often (ZooKeeper's session state)
    /// is reported at most once per third of its lease, not at every check.
    reported: Instant,
    /// Since when renewals have not got through, while they do not.
    failing_since: Option<Instant>,
    /// Whether the user was warned (without --verbose) about the current run of failures.
    warned: bool,
}

impl Held {
    fn new(request: &LockRequest, lease: Box<dyn Lease>) -> Held {
        Held {
            name: request.name.clone(),
            owner: request.owner.clone(),
            lease,
            renew_every: request.ttl / 3,
            due: Instant::now() + request.ttl / 3,
            reported: Instant::now(),
            failing_since: None,
            warned: false,
        }
    }
}

/// What the acquiring thread reports to the main thread.
enum Event {
    Busy(LockName, Vec<Holder>),
    /// The backend cannot be reached, or can again.
    Outage(LockName, Outage),
    /// One more lock taken; the main thread renews it from now on.
    Took(Held),
    /// Every lock taken (true), cancelled (false), or failed.
    Done(anyhow::Result<bool>),
}

pub fn run(plan: RunPlan, report: &Reporter) -> anyhow::Result<u8> {
    // A command that cannot run is known before anything is opened or taken.
    let program = match program::resolve(&plan.command[0]) {
        Ok(program) => program,
        Err(cannot) => {
            report.error(&cannot.message(&plan.command[0]));
            return Ok(cannot.exit_code());
        }
    };
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
    let backend = match backend::open(&plan.backend) {
        Ok(backend) => backend,
        Err(e) => return stopped(report).ok_or(e),
    };
    let location = backend.location();
    report.event(&format!("using {location}"));
    let decision = reentry::decide(
        backend.as_ref(),
        &location,
        &plan.requests,
        reentry::inherited(),
    )?;
    let requests = decision.to_acquire;
    if requests.is_empty() {
        report.event("every lock is already held by a parent dlock; running the command directly");
        guardian.dismiss();
        let err = Command::new(&program)
            .arg0(&plan.command[0])
            .args(&plan.command[1..])
            .exec();
        return Ok(spawn_failure(&plan.command[0], &err, report));
    }

    let file_limit = raise_file_limit(requests.len());

    let started = Instant::now();
    // First one attempt per lock on this thread: the uncontended case needs no helper thread.
    let mut held = Vec::new();
    let then_wait = !plan.no_wait;
    let held = match try_in_order(backend.as_ref(), &requests, then_wait, &mut held, report) {
        Ok(FirstTry::AllHeld) => Acquisition::Held(held),
        Ok(FirstTry::Busy(busy, holders)) if plan.no_wait => {
            release_quietly(held);
            Acquisition::Busy(requests[busy].name.clone(), holders)
        }
        Ok(FirstTry::Busy(busy, holders))
            if held.is_empty()
                && busy + 1 == requests.len()
                && backend.polls_while_waiting()
                && !report.draws_waiting_line() =>
        {
            wait_here(
                backend.as_ref(),
                &requests[busy],
                holders,
                &plan,
                &signals,
                report,
            )?
        }
        Ok(FirstTry::Busy(busy, _)) => {
            // This loop takes signals itself (sigtimedwait): block them again first.
            drop(interruptible.take());
            if let Some(code) = stopped(report) {
                release_quietly(held);
                return Ok(code);
            }
            acquire_waiting(backend, &requests[busy..], held, &plan, &signals, report)?
        }
        Ok(FirstTry::Lost(why)) => {
            release_quietly(held);
            Acquisition::Lost(why)
        }
        Err(e) => {
            release_quietly(held);
            return stopped(report).ok_or(e);
        }
    };
    // Blocked again from here on: they are for the command now.
    drop(interruptible.take());
    let held = match held {
        Acquisition::Held(held) => held,
        Acquisition::Busy(name, holders) => {
            report.notice(&busy_message(&name, &holders, None));
            return Ok(plan.conflict_exit_code);
        }
        Acquisition::TimedOut(name, holders) => {
            report.notice(&busy_message(&name, &holders, plan.wait));
            return Ok(plan.conflict_exit_code);
        }
        Acquisition::Signalled(n) => {
            report.event(&format!("signal {n} while waiting; giving up"));
            return Ok(exit::signalled(n));
        }
        Acquisition::Lost(why) => {
            report.error(&format!(
                "lost the lock while waiting for the others: {why}; nothing was run"
            ));
            return Ok(exit::LOCK_LOST);
        }
    };
    for h in &held {
        report.event(&format!(
            "acquired {:?} after {:?} with token {}",
            h.name.as_str(),
            started.elapsed(),
            h.lease.token()
        ));
    }
    // A signal that came while the last lock was being taken still means "stop": honour it now,
    // before anything was started.
    if let Some(code) = stopped(report) {
        release_all(held, report);
        return Ok(code);
    }
    while let Some(n) = signals.wait(Duration::ZERO) {
        if FORWARDED.contains(&n) {
            release_all(held, report);
            return Ok(exit::signalled(n));
        }
    }

    let env = child_environment(&held, &plan, &location, &decision.passed_on);
    supervise_child(held, &program, &env, &plan, file_limit, &signals, report)
}

/// The exit status for a stop signal caught while connecting or acquiring, if one was.
fn stopped(report: &Reporter) -> Option<u8> {
    let n = interrupt::caught()?;
    report.event(&format!("signal {n} while acquiring; giving up"));
    Some(exit::signalled(n))
}

/// A lock may hold a descriptor (a lock file, a connection), so many names at once can pass the
/// usual soft limit of 1024 open files: raise it to the hard limit when needed. Returns the limit
/// to restore for the command, which should not inherit dlock's.
fn raise_file_limit(locks: usize) -> Option<Rlimit> {
    let original = getrlimit(Resource::Nofile);
    // No soft limit (None) is no limit: nothing to raise.
    let soft = original.current?;
    if (locks as u64).saturating_add(64) < soft {
        return None;
    }
    let raised = Rlimit {
        current: original.maximum,
        maximum: original.maximum,
    };
    setrlimit(Resource::Nofile, raised).ok().map(|()| original)
}

fn busy_message(name: &LockName, holders: &[Holder], waited: Option<Duration>) -> String {
    let who = describe_holders(holders);
    match waited {
        Some(w) => format!(
            "gave up on lock {:?} after waiting {}{who}",
            name.as_str(),
            humantime::format_duration(w)
        ),
        None => format!("lock {:?} is busy{who}", name.as_str()),
    }
}

fn waiting_message(name: &LockName, holders: &[Holder]) -> String {
    format!(
        "waiting for lock {:?}{}",
        name.as_str(),
        describe_holders(holders)
    )
}

/// What the user hears of an outage while waiting (without --verbose too: a wait that seems to
/// hang should say why).
fn outage_message(name: &LockName, outage: &Outage) -> String {
    match outage {
        Outage::Unreachable { for_, why } if for_.is_zero() => {
            format!("{why}; still waiting for lock {:?}", name.as_str())
        }
        Outage::Unreachable { for_, why } => format!(
            "{why}; unreachable for {}, still waiting for lock {:?}",
            humantime::format_duration(Duration::from_secs(for_.as_secs())),
            name.as_str()
        ),
        Outage::Over { after } => format!(
            "reached the backend again after {}; waiting for lock {:?}",
            humantime::format_duration(round_ms(*after)),
            name.as_str()
        ),
    }
}

fn describe_holders(holders: &[Holder]) -> String {
    match holders {
        [] => String::new(),
        [one] => format!(": held {}", one.describe()),
        [first, rest @ ..] => format!(": held {} and {} more", first.describe(), rest.len()),
    }
}

enum Acquisition {
    Held(Vec<Held>),
    Busy(LockName, Vec<Holder>),
    TimedOut(LockName, Vec<Holder>),
    Signalled(i32),
    /// A lock taken earlier was lost while waiting for the next: why.
    Lost(String),
}

/// How the first attempts went.
enum FirstTry {
    AllHeld,
    /// The index of the first busy lock, and its holders.
    Busy(usize, Vec<Holder>),
    /// A lock taken earlier was lost meanwhile: why.
    Lost(String),
}

/// One attempt per lock, in order, stopping at the first busy one (`then_wait`: to wait for it
/// next). Locks taken are renewed between attempts, since taking thousands of them can outlast a
/// lease.
fn try_in_order(
    backend: &dyn Backend,
    requests: &[LockRequest],
    then_wait: bool,
    held: &mut Vec<Held>,
    report: &Reporter,
) -> anyhow::Result<FirstTry> {
    for (index, request) in requests.iter().enumerate() {
        match backend.try_acquire(request, then_wait)? {
            Attempt::Acquired(lease) => held.push(Held::new(request, lease)),
            Attempt::Busy(holders) => return Ok(FirstTry::Busy(index, holders)),
        }
        if let Err(why) = renew_due(held, report) {
            return Ok(FirstTry::Lost(why));
        }
    }
    Ok(FirstTry::AllHeld)
}

/// Waits for one lock on this thread: the common case of a single lock, nothing held meanwhile
/// that needs renewing, no status line to draw, and a backend that looks at the cancellation by
/// itself (`Backend::polls_while_waiting`). No helper thread is started, and the command starts
/// as soon as the lock comes, with no hop between threads. A forwarded signal or the deadline
/// stops the wait within the backend's polling interval (100ms at most).
fn wait_here(
    backend: &dyn Backend,
    request: &LockRequest,
    holders: Vec<Holder>,
    plan: &RunPlan,
    signals: &Signals,
    report: &Reporter,
) -> anyhow::Result<Acquisition> {
    report.event(&waiting_message(&request.name, &holders));
    let last_seen = Arc::new(Mutex::new(holders));
    let caught = Arc::new(AtomicI32::new(0));
    let signals = *signals;
    let waiting = Waiting::new({
        let last_seen = last_seen.clone();
        move |holders: &[Holder]| {
            if let Ok(mut seen) = last_seen.lock() {
                *seen = holders.to_vec();
            }
        }
    })
    .reporting_outages({
        let name = request.name.clone();
        let notice = report.notifier();
        move |outage: &Outage| notice(&outage_message(&name, outage))
    })
    .stopping(plan.wait.map(|w| Instant::now() + w), {
        let caught = caught.clone();
        move || match interrupt::caught().or_else(|| signals.take_pending_stop()) {
            Some(n) => {
                caught.store(n, Ordering::SeqCst);
                true
            }
            None => false,
        }
    });
    if let Some(lease) = backend.acquire(request, &waiting)? {
        return Ok(Acquisition::Held(vec![Held::new(request, lease)]));
    }
    let signal = caught.load(Ordering::SeqCst);
    if signal != 0 {
        return Ok(Acquisition::Signalled(signal));
    }
    let holders = last_seen.lock().map(|h| h.clone()).unwrap_or_default();
    Ok(Acquisition::TimedOut(request.name.clone(), holders))
}

/// Waits for the remaining locks on a helper thread while the main thread watches the deadline
/// and signals and keeps renewing the locks already held (`held`, from the first attempts, and each
/// lock the helper reports as it gets it). On any failure everything held is released.
fn acquire_waiting(
    backend: Box<dyn Backend>,
    requests: &[LockRequest],
    mut held: Vec<Held>,
    plan: &RunPlan,
    signals: &Signals,
    report: &Reporter,
) -> anyhow::Result<Acquisition> {
    let (tx, rx) = mpsc::channel();
    let main = signals.main_waker();
    let busy_tx = tx.clone();
    let outage_tx = tx.clone();
    let busy_name = std::sync::Arc::new(std::sync::Mutex::new(requests[0].name.clone()));
    let busy_name_for_waiting = busy_name.clone();
    let outage_name = busy_name.clone();
    let waiting = Waiting::new(move |holders: &[Holder]| {
        let name = busy_name_for_waiting.lock().map(|n| n.clone());
        if let Ok(name) = name {
            let _ = busy_tx.send(Event::Busy(name, holders.to_vec()));
            main.wake();
        }
    })
    .reporting_outages(move |outage: &Outage| {
        if let Ok(name) = outage_name.lock().map(|n| n.clone()) {
            let _ = outage_tx.send(Event::Outage(name, outage.clone()));
            main.wake();
        }
    });
    let thread_waiting = waiting.clone();
    let thread_requests = requests.to_vec();
    let acquirer = thread::Builder::new()
        .name("acquire".into())
        .spawn(move || {
            let send = |event| {
                let _ = tx.send(event);
                main.wake();
            };
            for request in &thread_requests {
                if let Ok(mut n) = busy_name.lock() {
                    *n = request.name.clone();
                }
                match backend.acquire(request, &thread_waiting) {
                    Ok(Some(lease)) => send(Event::Took(Held::new(request, lease))),
                    Ok(None) => return send(Event::Done(Ok(false))),
                    Err(e) => return send(Event::Done(Err(e))),
                }
            }
            send(Event::Done(Ok(true)));
        })
        .context("cannot start the acquiring thread")?;

    let started = Instant::now();
    let deadline = plan.wait.map(|w| started + w);
    let mut waiting_for = (requests[0].name.clone(), Vec::new());
    let tick = Duration::from_secs(1);
    loop {
        for event in rx.try_iter() {
            match event {
                Event::Took(h) => held.push(h),
                Event::Done(done) => {
                    report.clear_status();
                    let _ = acquirer.join();
                    return match done {
                        Ok(true) => Ok(Acquisition::Held(held)),
                        Ok(false) => {
                            release_quietly(held);
                            Ok(Acquisition::Busy(waiting_for.0, waiting_for.1))
                        }
                        Err(e) => {
                            release_quietly(held);
                            Err(e)
                        }
                    };
                }
                Event::Outage(name, outage) => report.notice(&outage_message(&name, &outage)),
                Event::Busy(name, holders) => {
                    report.event(&waiting_message(&name, &holders));
                    waiting_for = (name, holders);
                    draw_waiting(report, started, &waiting_for);
                }
            }
        }
        let now = Instant::now();
        let mut timeout = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
        if report.draws_waiting_line() {
            timeout = timeout.min(tick);
        }
        if let Some(due) = next_renewal(&held) {
            timeout = timeout.min(due.saturating_duration_since(now));
        }
        let outcome = match signals.wait(timeout) {
            Some(n) if FORWARDED.contains(&n) => Some(Acquisition::Signalled(n)),
            // Otherwise the channel has news, or an inherited child exited: look again.
            _ if deadline.is_some_and(|d| Instant::now() >= d) => Some(Acquisition::TimedOut(
                waiting_for.0.clone(),
                waiting_for.1.clone(),
            )),
            _ => renew_due(&mut held, report).err().map(Acquisition::Lost),
        };
        if let Some(outcome) = outcome {
            report.clear_status();
            cancel(&waiting, acquirer, &rx, signals, report);
            release_all(held, report);
            return Ok(outcome);
        }
        draw_waiting(report, started, &waiting_for);
    }
}

fn draw_waiting(report: &Reporter, started: Instant, (name, holders): &(LockName, Vec<Holder>)) {
    let holder = match holders.first() {
        Some(h) => format!(", held{}", h.who()),
        None => String::new(),
    };
    report.waiting_line(
        started.elapsed(),
        &format!("lock {:?}{holder}", name.as_str()),
    );
}

/// Stops a waiting acquisition and makes sure it leaves nothing behind: interrupts the blocking
/// call until the thread answers, and releases anything it acquired in the meantime.
fn cancel(
    waiting: &Waiting,
    acquirer: JoinHandle<()>,
    rx: &Receiver<Event>,
    signals: &Signals,
    report: &Reporter,
) {
    waiting.cancel();
    // Bounded: a backend stuck past this (a hung server) is abandoned; the process exits anyway.
    let give_up = Instant::now() + Duration::from_secs(5);
    while Instant::now() < give_up {
        interrupt::wake_thread(&acquirer);
        let mut done = false;
        for event in rx.try_iter() {
            match event {
                Event::Took(h) => {
                    release_all(vec![h], report);
                }
                Event::Done(_) => done = true,
                Event::Busy(..) | Event::Outage(..) => {}
            }
        }
        if done {
            break;
        }
        // Other signals meanwhile change nothing: dlock is already giving up.
        signals.wait(Duration::from_millis(20));
    }
    if acquirer.is_finished() {
        let _ = acquirer.join();
    }
}

/// Releases every lock; returns why the first one found no longer held was lost, if any was.
fn release_all(held: Vec<Held>, report: &Reporter) -> Option<String> {
    let mut lost = None;
    for h in held {
        let name = h.name.clone();
        match h.lease.release() {
            Ok(Released::Held) => report.event(&format!("released {:?}", name.as_str())),
            Ok(Released::Lost(why)) => {
                report.event(&format!(
                    "released {:?}, which was no longer ours",
                    name.as_str()
                ));
                lost.get_or_insert(format!("lock {:?}: {why}", name.as_str()));
            }
            // The lease runs out on its own; say so, but the command's status stands.
            Err(e) => report.error(&format!(
                "could not release lock {:?}: {e:#}",
                name.as_str()
            )),
        }
    }
    lost
}

fn release_quietly(held: Vec<Held>) {
    for h in held {
        let _ = h.lease.release();
    }
}

/// The exit status and message for a command that passed `program::resolve` but still could not
/// be started (changed meanwhile, or a missing ELF loader).
fn spawn_failure(program: &str, err: &io::Error, report: &Reporter) -> u8 {
    match err.kind() {
        io::ErrorKind::NotFound => {
            report.error(&format!(
                "cannot execute {program}: it or its loader was not found"
            ));
            exit::NOT_FOUND
        }
        io::ErrorKind::PermissionDenied => {
            report.error(&format!("cannot execute {program}: permission denied"));
            exit::NOT_EXECUTABLE
        }
        _ => {
            report.error(&format!("cannot execute {program}: {err}"));
            exit::NOT_EXECUTABLE
        }
    }
}

fn exit_code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(n)) => exit::signalled(n),
        (None, None) => exit::INTERNAL,
    }
}

/// The lock-related variables the command sees.
fn child_environment(
    held: &[Held],
    plan: &RunPlan,
    location: &str,
    inherited: &[Claim],
) -> Vec<(String, String)> {
    let mut env = vec![(
        "DLOCK_BACKEND".to_owned(),
        plan.backend.kind.as_str().to_owned(),
    )];
    // Held is in canonical (sorted) order; the last is the name itself for one lock, and the path
    // itself for one --tree path (its ancestors sort before it).
    if let Some(last) = held.last() {
        env.push(("DLOCK_NAME".into(), last.name.to_string()));
        env.push(("DLOCK_TOKEN".into(), last.lease.token().to_string()));
    }
    if held.len() > 1 {
        env.push(("DLOCK_LOCKS".into(), held.len().to_string()));
        for (i, h) in held.iter().enumerate() {
            env.push((format!("DLOCK_NAME_{}", i + 1), h.name.to_string()));
            env.push((
                format!("DLOCK_TOKEN_{}", i + 1),
                h.lease.token().to_string(),
            ));
        }
    }
    // What a nested dlock needs to prove that this one holds its locks: the inherited claims it
    // may still rely on, and this dlock's own.
    let start = reentry::own_start();
    let own: Vec<Claim> = held
        .iter()
        .filter_map(|h| Claim::own(location, &h.name, &h.owner, start))
        .collect();
    env.push((
        reentry::HELD_VAR.into(),
        reentry::held_value(inherited, &own),
    ));
    env
}

fn supervise_child(
    held: Vec<Held>,
    program: &Path,
    env: &[(String, String)],
    plan: &RunPlan,
    file_limit: Option<Rlimit>,
    signals: &Signals,
    report: &Reporter,
) -> anyhow::Result<u8> {
    let terminal = job::on_terminal();
    let foreground = terminal && job::in_foreground();
    let pid = match spawn::spawn(
        program,
        &plan.command,
        env,
        foreground,
        file_limit,
        signals.original(),
    ) {
        Ok(pid) => pid,
        Err(e) => {
            release_all(held, report);
            return Ok(spawn_failure(&plan.command[0], &e, report));
        }
    };
    if foreground {
        // Also from the parent, as shells do, so the order of the two calls does not matter.
        job::set_foreground(pid);
    }
    report.event(&format!(
        "started {:?} as pid {pid}",
        plan.command.join(" ")
    ));

    // Renewals happen on this thread, between events: a lease's renew is quick (a stat, one
    // round trip, a state check), and one thread deciding everything keeps the order of events
    // plain: nothing renews after a loss or after the release.
    let mut job = Job::new(pid, terminal);
    let mut held = held;
    let mut lost: Option<Instant> = None;
    let mut killed = false;
    loop {
        let wake = match lost {
            None => next_renewal(&held),
            Some(at) if !killed => Some(at + plan.kill_after),
            Some(_) => None,
        };
        let timeout = wake.map_or(Duration::MAX, |w| {
            w.saturating_duration_since(Instant::now())
        });
        match signals.wait(timeout) {
            Some(libc::SIGCHLD) if job.exited() => break,
            Some(libc::SIGCONT) => job.continued(),
            Some(n) if FORWARDED.contains(&n) => {
                report.event(&format!("forwarding signal {n} to the command"));
                job.signal(n);
            }
            _ => {}
        }
        // Timers are checked after every wake, so a stream of signals cannot starve renewals.
        let now = Instant::now();
        match lost {
            None if next_renewal(&held).is_some_and(|d| d <= now) => {
                if let Err(why) = renew_due(&mut held, report) {
                    report.error(&format!("lost the lock: {why}; terminating the command"));
                    job.signal(libc::SIGTERM);
                    lost = Some(Instant::now());
                }
            }
            Some(at) if !killed && now >= at + plan.kill_after => {
                report.error(&format!(
                    "the command outlived --kill-after {}; sending SIGKILL",
                    humantime::format_duration(plan.kill_after)
                ));
                job.signal(libc::SIGKILL);
                killed = true;
            }
            _ => {}
        }
    }
    job.take_terminal();
    if lost.is_some() {
        // Whatever else the command's group left running goes too: it has no lock any more. (Before
        // the command is reaped, while its group id cannot have been reused.)
        job.signal(libc::SIGKILL);
    }
    // A normal end leaves what the command started in the background alone, as flock(1) does.
    guard::disarm();
    let status = job.reap();
    report.event(&format!("command exited: {status}"));
    let lost_by_the_end = release_all(held, report);
    if lost.is_some() {
        return Ok(exit::LOCK_LOST);
    }
    // The command ended, but its lock had gone before dlock could tell (dlock was stopped past its
    // lease, or the lock was broken): the command's own status would claim it ran under the lock.
    if let Some(why) = lost_by_the_end {
        report.error(&format!(
            "the lock was lost before the command ended: {why}; exiting with {} instead of the \
             command's status ({status})",
            exit::LOCK_LOST
        ));
        return Ok(exit::LOCK_LOST);
    }
    Ok(exit_code_of(status))
}

/// When the next lease is due for renewal.
fn next_renewal(held: &[Held]) -> Option<Instant> {
    held.iter().map(|h| h.due).min()
}

/// Renews the leases that are due. A loss ends renewing at once: the others would only prolong
/// a doomed run.
fn renew_due(held: &mut [Held], report: &Reporter) -> Result<(), String> {
    let now = Instant::now();
    for h in held.iter_mut().filter(|h| h.due <= now) {
        let attempted = Instant::now();
        match h.lease.renew() {
            Renewal::Held { next } => {
                if let Some(since) = h.failing_since.take() {
                    let after = round_ms(since.elapsed());
                    let back = format!(
                        "renewed {:?} again after {} of failed attempts",
                        h.name.as_str(),
                        humantime::format_duration(after)
                    );
                    if std::mem::take(&mut h.warned) {
                        report.notice(&back);
                    } else {
                        report.event(&back);
                    }
                    h.reported = Instant::now();
                } else if h.reported.elapsed() + Duration::from_millis(5) >= h.renew_every {
                    report.event(&format!("renewed {:?}", h.name.as_str()));
                    h.reported = Instant::now();
                }
                h.due = Instant::now() + next;
            }
            Renewal::Unconfirmed {
                next,
                holds_for,
                why,
            } => {
                let first = h.failing_since.is_none();
                // From the start of the first failed attempt: an attempt may wait long for its answer.
                let since = *h.failing_since.get_or_insert(attempted);
                let holds = humantime::format_duration(round_ms(holds_for));
                // Every failure under --verbose, at the pace "renewed" lines come at most.
                if first || h.reported.elapsed() + Duration::from_millis(5) >= h.renew_every {
                    report.event(&format!(
                        "could not renew {:?}: {why}; the lease holds for {holds} more",
                        h.name.as_str()
                    ));
                    h.reported = Instant::now();
                }
                // Out loud once a third of the lease has gone by without a renewal (or sooner, if
                // what is left of the lease is shorter than that).
                if !h.warned && (since.elapsed() >= h.renew_every || holds_for <= h.renew_every) {
                    h.warned = true;
                    report.notice(&format!(
                        "cannot renew lock {:?} for {}: {why}; the lease holds for {holds} more, \
                         then the command is terminated",
                        h.name.as_str(),
                        humantime::format_duration(round_ms(since.elapsed()))
                    ));
                }
                h.due = Instant::now() + next;
            }
            Renewal::Lost(why) => return Err(format!("lock {:?}: {why}", h.name.as_str())),
        }
    }
    Ok(())
}

/// A duration to the millisecond, for people.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().min(u128::from(u64::MAX)) as u64)
}

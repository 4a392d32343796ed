//! Taking the locks. The common case (one lock, no status line to draw) is one wait on the main
//! thread: the backend makes its first attempt at once and looks at its cancellation at least every
//! `backend::CANCEL_CHECK`, and each time the main thread looks for signals and the deadline.
//! Otherwise: first one attempt per lock, in order, on the main thread; then, for a busy lock, a
//! wait on a helper thread that reports over a channel, while the main thread watches the deadline
//! and signals, renews what is already held and draws the status line. Whatever happens, a wait
//! that gives up leaves nothing held behind.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::group::{acquire_in_turn, Member};
use super::heartbeat::{next_renewal, release_all, release_quietly, renew_due, Held};
use super::progress::{describe_holders, Progress};
use super::RunPlan;
use crate::backend::{Attempt, Backend, Outage, Waiting};
use crate::failure::FromStore;
use crate::lock::group::Party;
use crate::lock::{Holder, LockName, LockRequest, RunEnd};
use crate::report::Reporter;
use crate::signal::interrupt;
use crate::signal::wait::Signals;
use crate::signal::FORWARDED;

/// How taking the locks ended.
pub(super) enum Acquisition {
    Held(Vec<Held>),
    Busy(LockName, Vec<Holder>),
    TimedOut(LockName, Vec<Holder>),
    /// A forwarded signal came while waiting.
    Signalled(i32),
    /// A lock taken earlier was lost while waiting for the next: why.
    Lost(String),
    /// A newer `--supersede` run waits for this lock.
    Superseded(LockName, Party),
}

/// How the first attempts went.
pub(super) enum FirstTry {
    AllHeld,
    /// The index of the first busy lock, and its holders.
    Busy(usize, Vec<Holder>),
    /// A lock taken earlier was lost meanwhile: why.
    Lost(String),
}

/// What the acquiring thread reports to the main thread.
enum Event {
    Busy(LockName, Vec<Holder>),
    /// How many wait in line before this one.
    InLine(usize),
    /// The backend cannot be reached, or can again.
    Outage(LockName, Outage),
    /// One more lock taken; the main thread renews it from now on.
    Took(Held),
    /// Every lock taken (true), cancelled (false), or failed.
    Done(anyhow::Result<bool>),
}

/// One attempt per lock, in order, stopping at the first busy one. Locks taken are renewed
/// between attempts, since taking thousands of them can outlast a lease.
pub(super) fn try_in_order(
    backend: &dyn Backend,
    requests: &[LockRequest],
    held: &mut Vec<Held>,
    report: &Reporter,
) -> anyhow::Result<FirstTry> {
    for (index, request) in requests.iter().enumerate() {
        match backend.try_acquire(request).or_store()? {
            Attempt::Acquired(lease) => held.push(Held::new(request, lease)),
            Attempt::Busy(holders) => return Ok(FirstTry::Busy(index, holders)),
        }
        if let Err(why) = renew_due(held, report) {
            return Ok(FirstTry::Lost(why));
        }
    }
    Ok(FirstTry::AllHeld)
}

/// Takes one lock on this thread, waiting as long as the plan allows, while nothing held needs
/// renewing and no status line is drawn. No helper thread is started, and the command starts as
/// soon as the lock comes, with no hop between threads. A forwarded signal or the deadline stops
/// the wait within `backend::CANCEL_CHECK` (the `Backend` contract), or at once when the signal
/// interrupts a blocking call.
pub(super) fn wait_here(
    backend: &dyn Backend,
    request: &LockRequest,
    plan: &RunPlan,
    signals: &Signals,
    report: &Reporter,
) -> anyhow::Result<Acquisition> {
    let last_seen: Arc<Mutex<Option<Vec<Holder>>>> = Arc::default();
    let progress = Arc::new(Mutex::new(Progress::new(
        &request.name,
        plan.wait,
        plan.progress_every,
    )));
    let log = report.progress_logger();
    let caught = Arc::new(AtomicI32::new(0));
    let signals = *signals;
    let waiting = Waiting::new({
        let last_seen = last_seen.clone();
        let progress = progress.clone();
        let name = request.name.clone();
        let log = log.clone();
        move |holders: &[Holder]| {
            if let Some(line) = crate::sync::lock(&progress).busy(&name, holders) {
                log(&line);
            }
            *crate::sync::lock(&last_seen) = Some(holders.to_vec());
        }
    })
    .wanting_holders(report.shows_holders())
    .reporting_place({
        let progress = progress.clone();
        move |ahead| crate::sync::lock(&progress).in_line(ahead)
    })
    .reporting_outages({
        let name = request.name.clone();
        let notice = report.notifier();
        move |outage: &Outage| notice(&outage_message(&name, outage))
    })
    .stopping(plan.wait.map(|w| Instant::now() + w), {
        let caught = caught.clone();
        let progress = progress.clone();
        move || {
            // Asked at least every CANCEL_CHECK while waiting: the CI log's steady lines too.
            if let Some(line) = crate::sync::lock(&progress).tick() {
                log(&line);
            }
            match interrupt::caught().or_else(|| signals.take_pending_stop()) {
                Some(n) => {
                    caught.store(n, Ordering::SeqCst);
                    true
                }
                None => false,
            }
        }
    });
    if let Some(lease) = acquire_in_turn(backend, request, &waiting)? {
        if let Some(line) = crate::sync::lock(&progress).acquired() {
            report.progress_end(&line);
        }
        return Ok(Acquisition::Held(vec![Held::new(request, lease)]));
    }
    let signal = caught.load(Ordering::SeqCst);
    if signal != 0 {
        return Ok(Acquisition::Signalled(signal));
    }
    let holders = crate::sync::lock(&last_seen).clone();
    Ok(Acquisition::TimedOut(
        request.name.clone(),
        holders.unwrap_or_default(),
    ))
}

/// Waits for the remaining locks on a helper thread while the main thread watches the deadline
/// and signals and keeps renewing the locks already held (`held`, from the first attempts, and each
/// lock the helper reports as it gets it). On any failure everything held is released.
pub(super) fn wait_on_helper(
    backend: Box<dyn Backend>,
    requests: &[LockRequest],
    mut held: Vec<Held>,
    plan: &RunPlan,
    signals: &Signals,
    mut member: Option<&mut Member>,
    report: &Reporter,
) -> anyhow::Result<Acquisition> {
    let (tx, rx) = mpsc::channel();
    let main = signals.main_waker();
    let busy_tx = tx.clone();
    let outage_tx = tx.clone();
    let place_tx = tx.clone();
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
    .wanting_holders(report.shows_holders())
    .reporting_place(move |ahead| {
        let _ = place_tx.send(Event::InLine(ahead));
        main.wake();
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
                match acquire_in_turn(backend.as_ref(), request, &thread_waiting) {
                    Ok(Some(lease)) => send(Event::Took(Held::new(request, lease))),
                    Ok(None) => return send(Event::Done(Ok(false))),
                    Err(e) => return send(Event::Done(Err(e))),
                }
            }
            send(Event::Done(Ok(true)));
        })
        .context("cannot start the acquiring thread")?;

    if let Some(member) = member.as_deref_mut() {
        if let Err(e) = member.start_waiting(report) {
            cancel(&waiting, acquirer, &rx, signals, report);
            release_quietly(held);
            return Err(e);
        }
    }
    let started = Instant::now();
    let deadline = plan.wait.map(|w| started + w);
    let mut waiting_for = (requests[0].name.clone(), Vec::new());
    let mut progress = Progress::new(&requests[0].name, plan.wait, plan.progress_every);
    let tick = Duration::from_secs(1);
    loop {
        for event in rx.try_iter() {
            match event {
                Event::Took(h) => held.push(h),
                Event::Done(done) => {
                    report.clear_status();
                    if let (Ok(true), Some(line)) = (&done, progress.acquired()) {
                        report.progress_end(&line);
                    }
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
                    if let Some(line) = progress.busy(&name, &holders) {
                        report.progress(&line);
                    }
                    waiting_for = (name, holders);
                }
                Event::InLine(ahead) => progress.in_line(ahead),
            }
        }
        let now = Instant::now();
        let mut timeout = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
        if report.draws_waiting_line() {
            timeout = timeout.min(tick);
        }
        if let Some(due) = progress.due() {
            timeout = timeout.min(due.saturating_duration_since(now));
        }
        if let Some(due) = next_renewal(&held) {
            timeout = timeout.min(due.saturating_duration_since(now));
        }
        if let Some(member) = member.as_deref() {
            timeout = timeout.min(member.next_poll().saturating_duration_since(now));
        }
        let signal = signals.wait(timeout);
        let superseded = member.as_deref_mut().and_then(Member::superseded);
        let outcome = match (signal, superseded) {
            (Some(n), _) if FORWARDED.contains(&n) => Some(Acquisition::Signalled(n)),
            (_, Some((name, by))) => Some(Acquisition::Superseded(name, by)),
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
            release_all(held, &RunEnd::NOT_RUN, report);
            return Ok(outcome);
        }
        if let Some(line) = progress.tick() {
            report.progress(&line);
        }
        report.status_line(|width| progress.status_line(width));
    }
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
                    release_all(vec![h], &RunEnd::NOT_RUN, report);
                }
                Event::Done(_) => done = true,
                Event::Busy(..) | Event::InLine(..) | Event::Outage(..) => {}
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

pub(super) fn busy_message(
    name: &LockName,
    holders: &[Holder],
    waited: Option<Duration>,
) -> String {
    let who = describe_holders(holders);
    match waited {
        Some(w) => format!(
            "gave up on lock {:?} after waiting {}{who}",
            name.as_str(),
            crate::text::duration(w)
        ),
        None => format!("lock {:?} is busy{who}", name.as_str()),
    }
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
            crate::text::duration(Duration::from_secs(for_.as_secs())),
            name.as_str()
        ),
        Outage::Over { after } => format!(
            "reached the backend again after {}; waiting for lock {:?}",
            crate::text::duration(*after),
            name.as_str()
        ),
    }
}

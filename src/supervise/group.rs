//! Concurrency groups, whatever the store: `run --supersede` (at most one such waiter per set of
//! names: a newer one makes the older give up with `Status::Superseded`) and `run
//! --cancel-in-progress` (a newer run with the option asks a holder that said it too to end; the
//! holder's command is terminated, it exits with `Status::Cancelled`, and the lock is reserved for
//! the asker, so that another dlock that gets it first gives it back). Every decision is made here
//! from each lock's group record (lock/group.rs), which a store only keeps (`GroupRecords`).
//!
//! The rules that keep a request and a release, or two requests, crossing each other safe:
//! - A request names the holders it cancels by their owner ids, read once, when the asker starts
//!   to wait: it never cancels a later holder, the asker included once it holds.
//! - A holder is cancelled only if its own run enlisted as cancellable (before it waited), and
//!   only all or none: the asker makes its requests only when every holder in its way, on every
//!   name, is cancellable (a shared holder is in the way of an exclusive request only).
//! - Records change only by `GroupRecords::update`, so no write is lost between two runs'.
//! - A reservation lasts while its asker waits (renewed every `RESERVE_RENEW`) and `RESERVE_FOR`
//!   after, so a dead asker holds up nobody for long.
//! - Once the run holds, the records are read on a thread of their own (`Watch`), which wakes the
//!   main thread when a request names this run: a read that hangs on a server cut off must never
//!   keep the main thread from seeing its lease run out and terminating the command. It reads them
//!   as soon as the store tells of a change (`GroupRecords::hear_changes`) and every `poll_every`
//!   besides; what the store tells is only a cue to read, never trusted for what it says.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::backend::{self, Backend, BackendConfig, Lease, Waiting};
use crate::failure::FromStore;
use crate::failure::{FailWith, Failure};
use crate::lock::group::{now_ms, CancelRequest, Cancelled, GroupRecord, Party};
use crate::lock::{Holder, LockName, LockRequest, Mode, RunEnd, Token};
use crate::report::Reporter;
use crate::signal::wait::MainWaker;

/// `run --supersede` and `run --cancel-in-progress`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub supersede: bool,
    pub cancel_in_progress: bool,
}

/// How long a reservation outlives the last renewal by its asker.
const RESERVE_FOR: Duration = Duration::from_secs(5);

/// How often an asker renews its reservation while it waits.
const RESERVE_RENEW: Duration = Duration::from_secs(1);

/// A run's side of its locks' group records, on a backend of its own: the one that waits is busy
/// on another thread.
pub(crate) struct Member {
    /// Where the records are; the watch's thread has it while the run holds (`None` then).
    backend: Option<Box<dyn Backend>>,
    /// While the run holds: the thread that reads the records.
    watch: Option<Watch>,
    requests: Vec<LockRequest>,
    options: Group,
    me: Party,
    poll_every: Duration,
    next_poll: Instant,
    /// Whether this run asked for holders to be cancelled (and so holds a reservation).
    asked: bool,
    reserved_at: Instant,
    /// Whether it enlisted as cancellable.
    enlisted: bool,
}

impl Member {
    /// The member for `requests` when `options` asks for any; a usage error naming the store
    /// when it keeps no group records.
    pub(super) fn open(
        config: &BackendConfig,
        requests: &[LockRequest],
        options: Group,
    ) -> anyhow::Result<Option<Member>> {
        if options == Group::default() {
            return Ok(None);
        }
        let backend = backend::open(config)?;
        // The command line refuses the options for a store that keeps no records (see
        // `Descriptor::groups`); a store may still keep none in some of its forms (Redlock).
        let Some(records) = backend.groups() else {
            let option = if options.supersede {
                "--supersede"
            } else {
                "--cancel-in-progress"
            };
            return Err(anyhow::anyhow!(
                "{option} is not available with the {} backend at {} yet",
                config.kind.as_str(),
                backend.location()
            ))
            .fail_with(Failure::Usage);
        };
        let poll_every = records.poll_every();
        let first = requests
            .first()
            .map(|r| (r.owner.as_str(), r.message.as_deref()));
        let (owner, message) = first.unwrap_or_default();
        Ok(Some(Member {
            me: Party::me(owner, message),
            backend: Some(backend),
            watch: None,
            requests: requests.to_vec(),
            options,
            poll_every,
            next_poll: Instant::now(),
            asked: false,
            reserved_at: Instant::now(),
            enlisted: false,
        }))
    }

    /// The backend, back from the watch's thread if it has it (waiting for a read under way).
    fn backend(&mut self) -> Option<&dyn Backend> {
        if let Some(watch) = self.watch.take() {
            self.backend = watch.stop();
        }
        self.backend.as_deref()
    }

    /// Changes the record of `name` as `change` says.
    fn change(&mut self, name: &LockName, change: impl Fn(&mut GroupRecord)) -> anyhow::Result<()> {
        match self.backend() {
            Some(backend) => change_record(backend, name, change),
            None => Ok(()),
        }
    }

    fn read(&mut self, name: &LockName) -> GroupRecord {
        self.backend()
            .map(|backend| read_record(backend, name))
            .unwrap_or_default()
    }

    /// Before anything is taken: a run with `--cancel-in-progress` says it may be cancelled.
    pub(super) fn enlist(&mut self) -> anyhow::Result<()> {
        if !self.options.cancel_in_progress {
            return Ok(());
        }
        let me = self.me.clone();
        for name in self.names() {
            self.change(&name, |r| {
                r.cancellable.retain(|p| p.owner != me.owner);
                r.cancellable.push(me.clone());
            })?;
        }
        self.enlisted = true;
        Ok(())
    }

    /// The wait begins: mark this run the newest `--supersede` waiter, and ask the holders in the
    /// way to end when every one of them may be cancelled (else say, once, who is waited for).
    pub(super) fn start_waiting(&mut self, report: &Reporter) -> anyhow::Result<()> {
        if self.options.supersede {
            let me = self.me.clone();
            for name in self.names() {
                self.change(&name, |r| r.supersede = Some(me.clone()))?;
            }
        }
        if self.options.cancel_in_progress {
            self.ask_to_cancel(report)?;
        }
        self.next_poll = Instant::now() + self.poll_every;
        Ok(())
    }

    fn ask_to_cancel(&mut self, report: &Reporter) -> anyhow::Result<()> {
        let mut asks = Vec::new();
        for request in self.requests.clone() {
            let Some(backend) = self.backend() else {
                return Ok(());
            };
            let holders = backend.status(&request.name).or_store()?.holders;
            let record = self.read(&request.name);
            let in_way: Vec<&Holder> = holders
                .iter()
                .filter(|h| h.owner != self.me.owner && in_the_way(request.mode, h.mode))
                .collect();
            for holder in &in_way {
                let why = if holder.kept.is_some_and(|k| k.ended) {
                    "is kept by --min-hold after its command ended: nothing to cancel"
                } else if holder.unreadable.is_some() || !record.is_cancellable(&holder.owner) {
                    "did not say --cancel-in-progress"
                } else {
                    continue;
                };
                report.notice(&format!(
                    "lock {:?} is held {}, which {why}; waiting for it",
                    request.name.as_str(),
                    holder.describe()
                ));
                return Ok(());
            }
            if !in_way.is_empty() {
                let targets: Vec<String> = in_way.iter().map(|h| h.owner.clone()).collect();
                asks.push((request.name.clone(), targets, describe(&in_way)));
            }
        }
        let me = self.me.clone();
        for (name, targets, who) in asks {
            self.change(&name, |r| {
                r.cancel = Some(CancelRequest {
                    targets: targets.clone(),
                    by: me.clone(),
                    until_ms: until_ms(),
                })
            })?;
            report.event(&format!(
                "asked {who} to end (--cancel-in-progress) for lock {:?}",
                name.as_str()
            ));
            self.asked = true;
        }
        self.reserved_at = Instant::now();
        Ok(())
    }

    /// When to look at the records next, while waiting or holding.
    pub(super) fn next_poll(&self) -> Instant {
        self.next_poll
    }

    /// While waiting, when due: the newer `--supersede` run that replaced this one, if one did;
    /// renews the reservation.
    pub(super) fn superseded(&mut self) -> Option<(LockName, Party)> {
        if Instant::now() < self.next_poll {
            return None;
        }
        self.next_poll = Instant::now() + self.poll_every;
        if self.asked && self.reserved_at.elapsed() >= RESERVE_RENEW {
            self.reserved_at = Instant::now();
            let me = self.me.owner.clone();
            for name in self.names() {
                let _ = self.change(&name, |r| {
                    if let Some(c) = r.cancel.as_mut().filter(|c| c.by.owner == me) {
                        c.until_ms = until_ms();
                    }
                });
            }
        }
        if !self.options.supersede {
            return None;
        }
        self.names().into_iter().find_map(|name| {
            let newer = self.read(&name).supersede?;
            (newer.owner != self.me.owner).then_some((name, newer))
        })
    }

    /// Every lock is held: the marks of a waiter go, and a `--cancel-in-progress` run starts
    /// watching for requests to end, on a thread that wakes the main one through `waker`. Never
    /// blocks: the command must start while the leases are fresh.
    pub(super) fn acquired(&mut self, waker: MainWaker) {
        let clean = self.options.supersede || self.asked;
        self.asked = false;
        if !clean && !self.options.cancel_in_progress {
            return;
        }
        let Some(backend) = self.backend.take() else {
            return;
        };
        let (stop, wakes) = mpsc::channel();
        let asked = Arc::new(Mutex::new(None));
        let job = WatchJob {
            names: self.names(),
            me: self.me.owner.clone(),
            clean,
            cancellable: self.options.cancel_in_progress,
            poll_every: self.poll_every,
            changed: stop.clone(),
            wakes,
            asked: asked.clone(),
            waker,
        };
        let spawned = std::thread::Builder::new()
            .name("group records".into())
            .spawn(move || job.run(backend));
        match spawned {
            Ok(thread) => {
                self.watch = Some(Watch {
                    stop,
                    asked,
                    thread: Some(thread),
                })
            }
            // No thread, and its backend gone with the closure: the run cannot be cancelled,
            // and its marks stay until they expire; it still runs under its locks.
            Err(_) => self.enlisted = false,
        }
    }

    /// The run lost its locks, most often because its store went out of reach: its marks are left
    /// to expire, as a killed dlock's are, and neither a read under way on the watch's thread nor
    /// a write that would wait on an unreachable store keeps dlock from exiting (a holder cut off
    /// from its server once took 9 s more to exit after its command was stopped).
    pub(super) fn abandon(&mut self) {
        // Dropping the watch tells its thread to stop without waiting for it; the process's exit
        // ends it if a read holds it up.
        self.watch = None;
        self.backend = None;
    }

    /// While holding: who asked this holder to end, once the watch saw a request (never blocks).
    pub(super) fn cancel_asked(&mut self) -> Option<Asked> {
        let watch = self.watch.as_ref()?;
        crate::sync::lock(&watch.asked).take()
    }

    /// The holder was cancelled by `by`: the records say so.
    pub(super) fn cancelled(&mut self, by: &Party, tokens: &[(LockName, Token)]) {
        let me = self.me.clone();
        for (name, token) in tokens {
            let _ = self.change(name, |r| {
                r.cancellable.retain(|p| p.owner != me.owner);
                r.last_cancelled = Some(Cancelled {
                    holder: me.clone(),
                    token: Some(*token),
                    by: by.clone(),
                });
            });
        }
        self.enlisted = false;
    }

    fn names(&self) -> Vec<LockName> {
        self.requests.iter().map(|r| r.name.clone()).collect()
    }

    /// Takes this run's marks out of its records (`all`: its enlistment too).
    fn forget(&mut self, all: bool) {
        let (names, me) = (self.names(), self.me.owner.clone());
        if let Some(backend) = self.backend() {
            forget(backend, &names, &me, all);
        }
    }
}

impl Drop for Member {
    /// Whatever the run's end, its marks go with it (a killed dlock's stay: a supersede mark or a
    /// cancellable entry of a run gone harms nobody, and its reservation ends by itself).
    fn drop(&mut self) {
        if self.enlisted || self.options.supersede || self.asked {
            self.forget(true);
        }
    }
}

/// The thread that reads a holder's records (see the file's rules).
struct Watch {
    stop: mpsc::Sender<Wake>,
    /// Who asked this run to end, once someone did.
    asked: Arc<Mutex<Option<Asked>>>,
    thread: Option<JoinHandle<Box<dyn Backend>>>,
}

/// A request to end this holder, as the watch found it.
pub(super) struct Asked {
    pub by: Party,
    /// Found on a read the store's word of a change set off (not at a periodic read).
    pub told: bool,
}

/// What wakes the watch's thread before its next periodic read.
enum Wake {
    Stop,
    /// The store told of a change to the records.
    Changed,
}

impl Watch {
    /// Ends the thread (once its read under way, if any, ends) and gives its backend back.
    fn stop(mut self) -> Option<Box<dyn Backend>> {
        let _ = self.stop.send(Wake::Stop);
        self.thread.take()?.join().ok()
    }
}

impl Drop for Watch {
    /// Not stopped by `stop`: the thread ends on its own (the store's hearing keeps a sender).
    fn drop(&mut self) {
        let _ = self.stop.send(Wake::Stop);
    }
}

/// What the watch's thread does.
struct WatchJob {
    names: Vec<LockName>,
    me: String,
    /// Take the marks of this run's wait out first.
    clean: bool,
    /// Look for requests to end, every `poll_every` and when the store tells of a change, until
    /// told to stop.
    cancellable: bool,
    poll_every: Duration,
    /// Given to the store, for its word of a change.
    changed: mpsc::Sender<Wake>,
    wakes: mpsc::Receiver<Wake>,
    asked: Arc<Mutex<Option<Asked>>>,
    waker: MainWaker,
}

impl WatchJob {
    fn run(self, backend: Box<dyn Backend>) -> Box<dyn Backend> {
        if self.clean {
            forget(backend.as_ref(), &self.names, &self.me, false);
        }
        if !self.cancellable {
            return backend;
        }
        let changed = self.changed.clone();
        let hearing = backend.groups().and_then(|records| {
            records.hear_changes(
                &self.names,
                Box::new(move || {
                    let _ = changed.send(Wake::Changed);
                }),
            )
        });
        // Once hearing, a first read at once: a request made before it began is not left to the
        // next periodic read.
        let mut read_now = hearing.is_some();
        loop {
            let poll_every = hearing
                .as_ref()
                .map_or(self.poll_every, |h| h.poll_every(self.poll_every));
            let told = if read_now {
                false
            } else {
                match self.wakes.recv_timeout(poll_every) {
                    Err(RecvTimeoutError::Timeout) => false,
                    Ok(Wake::Changed) => true,
                    Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => return backend,
                }
            };
            read_now = false;
            // Words that came meanwhile are answered by this one read.
            loop {
                match self.wakes.try_recv() {
                    Ok(Wake::Changed) => {}
                    Ok(Wake::Stop) | Err(mpsc::TryRecvError::Disconnected) => return backend,
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            let by = self.names.iter().find_map(|name| {
                let cancel = read_record(backend.as_ref(), name).cancel?;
                cancel.targets.contains(&self.me).then_some(cancel.by)
            });
            if let Some(by) = by {
                *crate::sync::lock(&self.asked) = Some(Asked { by, told });
                self.waker.wake();
                return backend;
            }
        }
    }
}

/// Changes the record of `name` as `change` says (nothing where the store keeps none).
fn change_record(
    backend: &dyn Backend,
    name: &LockName,
    change: impl Fn(&mut GroupRecord),
) -> anyhow::Result<()> {
    let Some(records) = backend.groups() else {
        return Ok(());
    };
    records
        .update(name, &mut |old| {
            let mut record = old.and_then(GroupRecord::read).unwrap_or_default();
            change(&mut record);
            (!record.is_empty()).then(|| record.text())
        })
        .or_store()
}

/// The record of `name`; an empty one when there is none or it cannot be read.
fn read_record(backend: &dyn Backend, name: &LockName) -> GroupRecord {
    backend
        .groups()
        .and_then(|records| records.read(name).ok().flatten())
        .and_then(|text| GroupRecord::read(&text))
        .unwrap_or_default()
}

/// Takes the marks of the run `me` out of the records of `names` (`all`: its enlistment too).
fn forget(backend: &dyn Backend, names: &[LockName], me: &str, all: bool) {
    for name in names {
        let _ = change_record(backend, name, |r| {
            if all {
                r.cancellable.retain(|p| p.owner != me);
            }
            if r.supersede.as_ref().is_some_and(|p| p.owner == me) {
                r.supersede = None;
            }
            if r.cancel.as_ref().is_some_and(|c| c.by.owner == me) {
                r.cancel = None;
            }
        });
    }
}

/// Whether a holder in `held` mode keeps a request in `mode` out: every holder keeps an exclusive
/// one out; only an exclusive holder keeps out a shared or `--limit` one (the seats of a limit are
/// not taken from their holders).
fn in_the_way(mode: Mode, held: Mode) -> bool {
    mode == Mode::Exclusive || held == Mode::Exclusive
}

fn describe(holders: &[&Holder]) -> String {
    let who: Vec<String> = holders.iter().map(|h| h.describe()).collect();
    who.join(", ")
}

fn until_ms() -> u64 {
    now_ms().saturating_add(RESERVE_FOR.as_millis() as u64)
}

/// `backend.acquire`, giving a lock got after a wait back to the `--cancel-in-progress` run it is
/// reserved for (and waiting until that run has it), so that the asker goes first.
pub(super) fn acquire_in_turn(
    backend: &dyn Backend,
    request: &LockRequest,
    waiting: &Waiting,
) -> anyhow::Result<Option<Box<dyn Lease>>> {
    loop {
        let Some(lease) = backend.acquire(request, waiting).or_store()? else {
            return Ok(None);
        };
        let Some(records) = backend.groups().filter(|_| waiting.has_waited()) else {
            return Ok(Some(lease));
        };
        let reserved = |text: Option<String>| {
            GroupRecord::read(&text?)?
                .reserved_for_other(&request.owner, now_ms())
                .is_some()
                .then_some(())
        };
        let read = || records.read(&request.name).ok().flatten();
        // Read with the grant where the store could: no round trip more per handoff.
        if reserved(lease.group_record().unwrap_or_else(read)).is_none() {
            return Ok(Some(lease));
        }
        let _ = lease.release(&RunEnd::NOT_RUN);
        // The reservation ends when its run takes the lock, or `RESERVE_FOR` after it stopped
        // renewing it: this loop ends by then, or when the wait is given up.
        while reserved(read()).is_some() {
            if waiting.is_cancelled() {
                return Ok(None);
            }
            std::thread::sleep(waiting.slice(records.poll_every().min(backend::CANCEL_CHECK)));
        }
    }
}

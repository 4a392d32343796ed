//! The one interface every lock store implements. The supervisor, the CLI and the tests speak only
//! to `Backend` and `Lease`; each store (a lock file, Redis, ZooKeeper) lives in its own crate and
//! nothing outside that crate knows how it keeps a lock. The command's registry (src/backend.rs)
//! describes each store once and opens it.

use crate::error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::lock::{Holder, LastRuns, LockName, LockRequest, RunEnd, Token, Waiter};

mod groups;
pub mod lease_clock;
pub mod stop;
pub mod watch;

pub use groups::{update_by_swaps, GroupRecords, Hearing, OnChange, Wanted, POLL_WHILE_HEARING};

/// Where and how to reach a backend, from the command line and environment.
#[derive(Clone, Debug)]
pub struct BackendConfig {
    /// `--url`, possibly given several times (Redlock); empty means the backend's default.
    pub urls: Vec<String>,
    /// How long to try to reach a server (network backends).
    pub connect_timeout: Duration,
    /// Create the place locks are kept if it is missing (the file backend's default directory;
    /// one given by the user must exist): `run` only, so `status`, `list` and `release` leave
    /// nothing behind.
    pub create: bool,
    /// Redis: how many replicas must acknowledge each acquisition and renewal (`--replicas`).
    pub replicas: u32,
    /// When to give up a connection being made (a signal while acquiring).
    pub stop: stop::Stop,
    /// The file backend, run by root: the uids besides root whose lock directories and files it
    /// may use (`--trust-owner`).
    pub trust_owners: Vec<u32>,
}

/// A lock store.
///
/// Acquisition either succeeds with a `Lease` the caller then keeps alive and releases, or reports
/// the lock busy. The two ways to acquire are independent: neither leaves state behind that the
/// other, or a later call, picks up, so the caller may use them in any order and any number of
/// times.
///
/// Every backend's `acquire` MUST, while it waits:
/// - look at `Waiting::is_cancelled` at least every `CANCEL_CHECK`: it blocks in slices of at most
///   `waiting.slice(CANCEL_CHECK)` (a kernel lock under `blocking::Alarm`, a read with a
///   socket timeout, a watch polled with a timer), so that a deadline or a stop the caller only
///   notices when asked (`Waiting::stopping`) ends the wait within that time, on whatever thread
///   the wait runs;
/// - return promptly when a blocking call is interrupted by the wake signal
///   (`signal::WAKE_SIGNAL`, EINTR): look at `is_cancelled` before retrying the call, and never
///   block that signal while waiting (only for the last calls that clean up, see
///   `blocking::WakeBlocked`). A single exchange with a server, which cannot be sliced, is
///   bounded by the backend's own timeouts and by `waiting.slice`.
///
/// Given that, the caller may run any wait on its own thread, or on a helper thread it cancels
/// and wakes; it needs to know nothing else of how a backend waits.
pub trait Backend: Send {
    /// Where the locks live, for messages and for recognising a lock already held by an ancestor
    /// process (`file:/run/user/1000/dlock`, `redis://127.0.0.1:6379`).
    fn location(&self) -> String;

    /// One attempt, never waiting: the lock, or who holds it. A busy attempt leaves nothing
    /// behind in the store or in the backend (no place in a queue, no node, no subscription). For
    /// `--no-wait`, and for the first tries of several names.
    fn try_acquire(&self, request: &LockRequest) -> error::Result<Attempt>;

    /// Wait until the lock is acquired, or `waiting` is cancelled (`Ok(None)`). Makes its first
    /// attempt at once, so a free lock costs what `try_acquire` costs, and takes its place in line
    /// with that attempt (a backend that serves waiters in order orders this one by it). Reports
    /// who holds the lock with `waiting.busy(..)` when it finds it busy (at least once before it
    /// blocks; an empty list when `waiting.wants_holders()` says nobody will show them and
    /// finding them out would cost a request to the server), and an unreachable backend with
    /// `waiting.unreachable(..)`. A cancelled or failed
    /// wait leaves nothing of itself behind in the store. See the trait's documentation for how
    /// soon it must notice a cancellation.
    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> error::Result<Option<Box<dyn Lease>>>;

    /// Who holds `name` now (an empty list: free).
    fn status(&self, name: &LockName) -> error::Result<LockStatus>;

    /// Every lock currently held whose name starts with `prefix`, sorted by name, and the entries
    /// of the store that could not be read as locks.
    fn list(&self, prefix: &str) -> error::Result<Listing>;

    /// What the store keeps of `name`'s runs: the last run and the last that succeeded (see
    /// lock/last_run.rs for the rules every store follows when it writes them).
    fn last_runs(&self, name: &LockName) -> error::Result<LastRuns>;

    /// Every lock whose name starts with `prefix` and of which the store keeps a last run or a
    /// last success, held or free, sorted by name, each with what `last_runs` says of it (records
    /// that expired are left out). At most `MAX_LISTED_RUNS` names, and whether there were more;
    /// what the store keeps under a name that is no lock's is left out too (see `runs_of`).
    fn list_runs(&self, prefix: &str) -> error::Result<RunsFound>;

    /// Break the lock for every holder (an operator cleaning up after a dead one). Returns the holders
    /// removed. Each removed holder's dlock notices at its next renewal and treats the lock as lost.
    fn force_release(&self, name: &LockName) -> error::Result<Vec<Holder>>;

    /// Where the store keeps each lock's concurrency group record (`run --supersede` and
    /// `--cancel-in-progress`, see lock/group.rs), or `None` for a store that keeps none: the
    /// options are then refused (64), naming the store.
    fn groups(&self) -> Option<&dyn GroupRecords> {
        None
    }
}

/// The outcome of one acquisition attempt.
pub enum Attempt {
    Acquired(Box<dyn Lease>),
    /// Held by others, who are listed when the backend can tell.
    Busy(Vec<Holder>),
}

/// A held lock. The supervisor's main thread renews it (first a third of the ttl after acquiring,
/// or sooner if `first_renewal` says, then whenever `renew` says), between the events it waits for, so `renew` must not block for
/// long: a network backend bounds each attempt and keeps its own deadline across attempts.
pub trait Lease: Send {
    /// This acquisition's fencing token.
    fn token(&self) -> Token;

    /// Keep the lock: extend the lease, or check that it still stands. Says when to call again:
    /// any time, also much sooner than a third of the ttl (a lease that only looks at a state its
    /// client keeps up by itself may ask to be checked often, to notice a loss soon). The caller
    /// calls it when due and tells the user of a successful renewal at most once per third of the
    /// ttl, however often it is asked to renew.
    fn renew(&mut self) -> Renewal;

    /// When the first `renew` is due after acquiring, if sooner than a third of the ttl: a lease
    /// that judges a stopped process by the time between renewals (ZooKeeper's, whose session
    /// the server may have made shorter than the ttl) must be asked within that time from the
    /// start.
    fn first_renewal(&self) -> Option<Duration> {
        None
    }

    /// The lock's concurrency group record as the store read it just after this grant, in the
    /// same round trip (`Some(None)`: there is none), where it did; `None`: not read, and the
    /// supervisor reads it itself when it needs it (after a grant that waited).
    fn group_record(&self) -> Option<Option<String>> {
        None
    }

    /// Until when the lock surely holds by this side's clock, for a lease a server grants for a
    /// time (`None`: the store tells a loss itself). A run that ended after this, whose release
    /// then cannot reach the server, cannot show it held the lock to its end.
    fn surely_held_until(&self) -> Option<Instant> {
        None
    }

    /// Give the lock up. Acts only on this holder's own entry, never on another's. Says whether the
    /// lock was still this holder's when it let go: the supervisor calls this once the command has
    /// ended, so a lock found lost here (a lease that passed while dlock was stopped, a lock broken
    /// meanwhile) means the command may not have held it to its end. An error: the backend could
    /// not be told, and cannot say. `end` says how the run ended, which the store records in the
    /// same round trip where it can, and whether `--min-hold` keeps the lock taken.
    fn release(self: Box<Self>, end: &RunEnd) -> error::Result<Released>;
}

/// What a release found.
#[derive(Debug, PartialEq, Eq)]
pub enum Released {
    /// The lock was still this holder's; now it is given up.
    Held,
    /// It was no longer this holder's (expired, broken by `release --force`, deleted): why.
    Lost(String),
}

/// What a renewal found.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Extended, or confirmed to stand (or so fresh that nothing was due); renew again after this
    /// long.
    Held { next: Duration },
    /// This attempt did not get through (the backend could not be reached), but the lease still
    /// holds for `holds_for` by this side's reckoning: try again after `next`. `why`: for the user.
    Unconfirmed {
        next: Duration,
        holds_for: Duration,
        why: String,
    },
    /// Renewed or not, the lock may now be someone else's: why, for the user.
    Lost(String),
}

/// A lock's state as `status` and `list` report it.
#[derive(Clone, Debug, Serialize)]
pub struct LockStatus {
    pub name: LockName,
    pub holders: Vec<Holder>,
    /// Where the backend keeps the lock (a file's path, a key, a znode), for operators.
    pub location: String,
    /// Who waits for it, first in line first, where the backend keeps a queue (Redis, ZooKeeper);
    /// `None` where it keeps none (the file backend's waiters block in the kernel, unseen).
    pub waiters: Option<Vec<Waiter>>,
}

/// What `list` found.
#[derive(Debug, Default)]
pub struct Listing {
    /// The held locks, sorted by name.
    pub held: Vec<LockStatus>,
    /// Entries that are not readable locks (a FIFO where a lock file should be, a file that is not
    /// dlock's), one line each naming the entry and what is wrong; `list` shows them on stderr.
    pub unreadable: Vec<String>,
}

impl From<Vec<LockStatus>> for Listing {
    fn from(held: Vec<LockStatus>) -> Listing {
        Listing {
            held,
            unreadable: vec![],
        }
    }
}

/// Most names `list_runs` reads the records of: each costs a read, and an entry anyone could write
/// is no reason to read without end.
pub const MAX_LISTED_RUNS: usize = 10_000;

/// What `list_runs` found.
#[derive(Debug, Default)]
pub struct RunsFound {
    /// Each lock with records, sorted by name, and what `last_runs` says of it.
    pub runs: Vec<(LockName, LastRuns)>,
    /// Whether there were more than `MAX_LISTED_RUNS` names, of which `runs` has the first.
    pub cut: bool,
}

/// `list_runs` once a store has found the names it keeps records under (in any order, repeated
/// or not, each only if it starts with `prefix`; a store that stops looking must hand over more
/// than `MAX_LISTED_RUNS` when there are, so that `cut` says so): each one's records, read by
/// `read` (as `last_runs` reads them), for the first `MAX_LISTED_RUNS` names by order; the names
/// with none (expired, or removed meanwhile) are left out.
pub fn runs_of(
    prefix: &str,
    mut names: Vec<LockName>,
    read: impl Fn(&LockName) -> error::Result<LastRuns>,
) -> error::Result<RunsFound> {
    names.retain(|name| name.as_str().starts_with(prefix));
    names.sort();
    names.dedup();
    let cut = names.len() > MAX_LISTED_RUNS;
    names.truncate(MAX_LISTED_RUNS);
    let mut found = Vec::with_capacity(names.len());
    for name in names {
        let runs = read(&name)?;
        if runs.last_run.is_some() || runs.last_success.is_some() {
            found.push((name, runs));
        }
    }
    Ok(RunsFound { runs: found, cut })
}

/// Where a waiting acquisition reports who holds the lock.
type BusyReport = dyn Fn(&[Holder]) + Send + Sync;

/// Whether a wait should stop, asked whenever the backend looks at its cancellation.
type StopCheck = dyn Fn() -> bool + Send + Sync;

/// Where a waiting acquisition reports an outage of the backend.
type OutageReport = dyn Fn(&Outage) + Send + Sync;

/// Where a waiting acquisition reports how many wait in line before it.
type PlaceReport = dyn Fn(usize) + Send + Sync;

/// News of an outage while waiting, at most once per `OUTAGE_REPORT_EVERY` while it lasts.
#[derive(Clone, Debug)]
pub enum Outage {
    /// The backend cannot be reached (for `for_` so far); `why` names it and says how it fails.
    Unreachable { for_: Duration, why: String },
    /// Reached again after this long.
    Over { after: Duration },
}

/// How long a waiting `acquire` may go without looking at its cancellation (see `Backend`).
pub const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// How long a wait that gives up (its deadline, a signal, a failure) may spend taking its place
/// out of the store: a place left behind goes with its lease, while the user waits for the exit,
/// which a server that stopped answering must not hold up by a whole call's timeout.
pub const LEAVE_WITHIN: Duration = Duration::from_millis(500);

/// How often a waiter repeats that the backend is still unreachable.
pub const OUTAGE_REPORT_EVERY: Duration = Duration::from_secs(10);

/// A waiter's tries while the backend is unreachable: first after this long, then twice as long
/// each time, up to `RETRY_MOST`.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);
pub const RETRY_MOST: Duration = Duration::from_secs(2);

/// Since when the backend has been unreachable, and when that was last told.
#[derive(Default)]
struct OutageState {
    since: Option<Instant>,
    told: Option<Instant>,
}

/// The caller's side of a blocking acquisition: whether to give up, and where to report who holds
/// the lock while waiting.
#[derive(Clone)]
pub struct Waiting {
    cancelled: Arc<AtomicBool>,
    on_busy: Arc<BusyReport>,
    /// For a wait on the caller's own thread, which has no other way to stop it.
    stop_when: Option<Arc<StopCheck>>,
    /// When the caller gives up, if it does.
    deadline: Option<Instant>,
    on_outage: Option<Arc<OutageReport>>,
    outage: Arc<std::sync::Mutex<OutageState>>,
    on_place: Option<Arc<PlaceReport>>,
    /// Whether the caller shows who holds the lock (not under `-q`).
    holders_wanted: bool,
    /// Whether the lock was found busy (`busy` was called): the acquisition waited.
    waited: Arc<AtomicBool>,
}

impl Waiting {
    pub fn new(on_busy: impl Fn(&[Holder]) + Send + Sync + 'static) -> Waiting {
        Waiting {
            cancelled: Arc::new(AtomicBool::new(false)),
            on_busy: Arc::new(on_busy),
            stop_when: None,
            deadline: None,
            on_outage: None,
            outage: Arc::default(),
            on_place: None,
            holders_wanted: true,
            waited: Arc::default(),
        }
    }

    /// A wait whose caller shows who holds the lock (`wanted`), or shows nothing of it (`-q`):
    /// then a backend that must ask the server who holds it does not ask.
    pub fn wanting_holders(mut self, wanted: bool) -> Waiting {
        self.holders_wanted = wanted;
        self
    }

    /// Whether the holders reported with `busy` are shown to anyone (see `wanting_holders`).
    pub fn wants_holders(&self) -> bool {
        self.holders_wanted
    }

    /// A wait that reports its place in line to `report` (see `in_line`).
    pub fn reporting_place(mut self, report: impl Fn(usize) + Send + Sync + 'static) -> Waiting {
        self.on_place = Some(Arc::new(report));
        self
    }

    /// How many wait in line before this waiter, for a backend that keeps a line (Redis, ZooKeeper):
    /// told when the wait starts and whenever it changes, for the user's status line.
    pub fn in_line(&self, ahead: usize) {
        if let Some(report) = &self.on_place {
            report(ahead)
        }
    }

    /// A wait that reports outages of the backend to `report`.
    pub fn reporting_outages(
        mut self,
        report: impl Fn(&Outage) + Send + Sync + 'static,
    ) -> Waiting {
        self.on_outage = Some(Arc::new(report));
        self
    }

    /// The backend could not be reached on this try (`why`: where, and how it failed). Told once
    /// when an outage starts and then every `OUTAGE_REPORT_EVERY`; the backend keeps trying.
    pub fn unreachable(&self, why: &str) {
        let mut state = dlock_sys::sync::lock(&self.outage);
        let now = Instant::now();
        let since = *state.since.get_or_insert(now);
        if state
            .told
            .is_some_and(|told| now.saturating_duration_since(told) < OUTAGE_REPORT_EVERY)
        {
            return;
        }
        state.told = Some(now);
        drop(state);
        if let Some(report) = &self.on_outage {
            report(&Outage::Unreachable {
                for_: now.saturating_duration_since(since),
                why: why.to_owned(),
            });
        }
    }

    /// The backend answered again (a no-op when there was no outage).
    pub fn reachable(&self) {
        let mut state = dlock_sys::sync::lock(&self.outage);
        let Some(since) = state.since.take() else {
            return;
        };
        state.told = None;
        drop(state);
        if let Some(report) = &self.on_outage {
            report(&Outage::Over {
                after: since.elapsed(),
            });
        }
    }

    /// A wait that also stops when `check` says so (asked whenever the backend looks at the
    /// cancellation) or at `deadline`.
    pub fn stopping(
        mut self,
        deadline: Option<Instant>,
        check: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Waiting {
        self.stop_when = Some(Arc::new(check));
        self.deadline = deadline;
        self
    }

    pub fn is_cancelled(&self) -> bool {
        if self.cancelled.load(Ordering::SeqCst) {
            return true;
        }
        let stop = self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.stop_when.as_ref().is_some_and(|check| check());
        if stop {
            self.cancel();
        }
        stop
    }

    /// How long a backend may block before looking at the cancellation again: `most`, or less if
    /// the caller gives up sooner.
    pub fn slice(&self, most: Duration) -> Duration {
        self.deadline.map_or(most, |d| {
            most.min(d.saturating_duration_since(Instant::now()))
        })
    }

    /// Ask the acquisition to stop. Backends look at `is_cancelled` at least every `CANCEL_CHECK`
    /// and whenever a blocking call returns; a caller on another thread also interrupts the
    /// blocking call with `signal::WAKE_SIGNAL` so that it returns at once (see `Backend`).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst)
    }

    /// Report the current holders of a lock being waited for.
    pub fn busy(&self, holders: &[Holder]) {
        self.waited.store(true, Ordering::SeqCst);
        (self.on_busy)(holders)
    }

    /// Whether an acquisition with this wait found its lock busy (so it waited, or was about to).
    pub fn has_waited(&self) -> bool {
        self.waited.load(Ordering::SeqCst)
    }
}

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

use std::time::{Duration, Instant};

use crate::backend::{self, Backend, BackendConfig, GroupRecords, Lease, Waiting};
use crate::exit::{FailWith, Failure};
use crate::lock::group::{now_ms, CancelRequest, Cancelled, GroupRecord, Party};
use crate::lock::{Holder, LockName, LockRequest, Mode, RunEnd, Token};
use crate::report::Reporter;

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
    backend: Box<dyn Backend>,
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
            backend,
            requests: requests.to_vec(),
            options,
            poll_every,
            next_poll: Instant::now(),
            asked: false,
            reserved_at: Instant::now(),
            enlisted: false,
        }))
    }

    fn records(&self) -> Option<&dyn GroupRecords> {
        self.backend.groups()
    }

    /// Changes the record of `name` as `change` says.
    fn change(&self, name: &LockName, change: impl Fn(&mut GroupRecord)) -> anyhow::Result<()> {
        let Some(records) = self.records() else {
            return Ok(());
        };
        records.update(name, &mut |old| {
            let mut record = old.and_then(GroupRecord::read).unwrap_or_default();
            change(&mut record);
            (!record.is_empty()).then(|| record.text())
        })
    }

    fn read(&self, name: &LockName) -> GroupRecord {
        self.records()
            .and_then(|records| records.read(name).ok().flatten())
            .and_then(|text| GroupRecord::read(&text))
            .unwrap_or_default()
    }

    /// Before anything is taken: a run with `--cancel-in-progress` says it may be cancelled.
    pub(super) fn enlist(&mut self) -> anyhow::Result<()> {
        if !self.options.cancel_in_progress {
            return Ok(());
        }
        for request in &self.requests {
            self.change(&request.name, |r| {
                r.cancellable.retain(|p| p.owner != self.me.owner);
                r.cancellable.push(self.me.clone());
            })?;
        }
        self.enlisted = true;
        Ok(())
    }

    /// The wait begins: mark this run the newest `--supersede` waiter, and ask the holders in the
    /// way to end when every one of them may be cancelled (else say, once, who is waited for).
    pub(super) fn start_waiting(&mut self, report: &Reporter) -> anyhow::Result<()> {
        if self.options.supersede {
            for request in &self.requests {
                self.change(&request.name, |r| r.supersede = Some(self.me.clone()))?;
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
        for request in &self.requests {
            let holders = self.backend.status(&request.name)?.holders;
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
        for (name, targets, who) in asks {
            self.change(&name, |r| {
                r.cancel = Some(CancelRequest {
                    targets: targets.clone(),
                    by: self.me.clone(),
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
            for request in &self.requests {
                let _ = self.change(&request.name, |r| {
                    if let Some(c) = r.cancel.as_mut().filter(|c| c.by.owner == self.me.owner) {
                        c.until_ms = until_ms();
                    }
                });
            }
        }
        if !self.options.supersede {
            return None;
        }
        self.requests.iter().find_map(|request| {
            let newer = self.read(&request.name).supersede?;
            (newer.owner != self.me.owner).then(|| (request.name.clone(), newer))
        })
    }

    /// Every lock is held: the marks of a waiter go.
    pub(super) fn acquired(&mut self) {
        if self.options.supersede || self.asked {
            self.forget(false);
        }
        self.asked = false;
        self.next_poll = Instant::now() + self.poll_every;
    }

    /// While holding, when due: who asks this holder to end, if anyone does.
    pub(super) fn cancel_asked(&mut self) -> Option<Party> {
        if !self.options.cancel_in_progress || Instant::now() < self.next_poll {
            return None;
        }
        self.next_poll = Instant::now() + self.poll_every;
        self.requests.iter().find_map(|request| {
            let cancel = self.read(&request.name).cancel?;
            cancel.targets.contains(&self.me.owner).then_some(cancel.by)
        })
    }

    /// The holder was cancelled by `by`: the records say so.
    pub(super) fn cancelled(&mut self, by: &Party, tokens: &[(LockName, Token)]) {
        for (name, token) in tokens {
            let _ = self.change(name, |r| {
                r.cancellable.retain(|p| p.owner != self.me.owner);
                r.last_cancelled = Some(Cancelled {
                    holder: self.me.clone(),
                    token: Some(*token),
                    by: by.clone(),
                });
            });
        }
        self.enlisted = false;
    }

    /// Takes this run's marks out of its records (`all`: its enlistment too).
    fn forget(&self, all: bool) {
        let me = &self.me.owner;
        for request in &self.requests {
            let _ = self.change(&request.name, |r| {
                if all {
                    r.cancellable.retain(|p| p.owner != *me);
                }
                if r.supersede.as_ref().is_some_and(|p| p.owner == *me) {
                    r.supersede = None;
                }
                if r.cancel.as_ref().is_some_and(|c| c.by.owner == *me) {
                    r.cancel = None;
                }
            });
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
        let Some(lease) = backend.acquire(request, waiting)? else {
            return Ok(None);
        };
        let Some(records) = backend.groups().filter(|_| waiting.has_waited()) else {
            return Ok(Some(lease));
        };
        let reserved = || {
            let text = records.read(&request.name).ok().flatten()?;
            GroupRecord::read(&text)?
                .reserved_for_other(&request.owner, now_ms())
                .is_some()
                .then_some(())
        };
        if reserved().is_none() {
            return Ok(Some(lease));
        }
        let _ = lease.release(&RunEnd::NOT_RUN);
        // The reservation ends when its run takes the lock, or `RESERVE_FOR` after it stopped
        // renewing it: this loop ends by then, or when the wait is given up.
        while reserved().is_some() {
            if waiting.is_cancelled() {
                return Ok(None);
            }
            std::thread::sleep(waiting.slice(records.poll_every().min(backend::CANCEL_CHECK)));
        }
    }
}

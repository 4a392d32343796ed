//! Keeping the locks once taken: renewing each lease when it is due, telling the user (once, out
//! loud) when renewals fail and how long the lease still holds, noticing a loss, and letting the
//! locks go at the end with a word on any that was lost meanwhile.
//!
//! Renewals happen on the main thread, between the events it waits for: a lease's renew is quick (a
//! stat, one round trip, a state check), and one thread deciding everything keeps the order of
//! events plain: nothing renews after a loss or after the release.

use std::time::{Duration, Instant};

use crate::backend::{Lease, Released, Renewal};
use crate::lock::{LockName, LockRequest, RunEnd};
use crate::report::Reporter;

/// A lock this dlock holds.
pub struct Held {
    pub(super) name: LockName,
    /// The acquisition's owner id, which a nested dlock looks for in the backend's records.
    pub(super) owner: String,
    pub(super) lease: Box<dyn Lease>,
    /// A third of the lease: when to renew first (as every backend renews); the lease then says.
    renew_every: Duration,
    /// When to renew next.
    due: Instant,
    /// When a renewal was last reported: a lease may ask to be renewed often (`Lease::renew`), and
    /// is reported at most once per third of its lease, not at every renewal.
    reported: Instant,
    /// Since when renewals have not got through, while they do not.
    failing_since: Option<Instant>,
    /// Whether the user was warned (without --verbose) about the current run of failures.
    warned: bool,
}

impl Held {
    pub fn name(&self) -> &LockName {
        &self.name
    }

    pub(super) fn new(request: &LockRequest, lease: Box<dyn Lease>) -> Held {
        // A lease kept by --min-hold on a lease of its own (etcd) must hear from us before that
        // one ends, however long the ttl; and a lease may want to be asked sooner from the start.
        let first = (request.ttl / 3)
            .min(request.min_hold.map_or(request.ttl, |d| d / 3))
            .min(lease.first_renewal().unwrap_or(Duration::MAX));
        Held {
            name: request.name.clone(),
            owner: request.owner.clone(),
            lease,
            renew_every: request.ttl / 3,
            due: Instant::now() + first,
            reported: Instant::now(),
            failing_since: None,
            warned: false,
        }
    }
}

/// When the next lease is due for renewal.
pub(crate) fn next_renewal(held: &[Held]) -> Option<Instant> {
    held.iter().map(|h| h.due).min()
}

/// Renews the leases that are due. A loss ends renewing at once: the others would only prolong
/// a doomed run.
pub(crate) fn renew_due(held: &mut [Held], report: &Reporter) -> Result<(), String> {
    let now = Instant::now();
    for h in held.iter_mut().filter(|h| h.due <= now) {
        let attempted = Instant::now();
        match h.lease.renew() {
            Renewal::Held { next } => {
                if let Some(since) = h.failing_since.take() {
                    let after = since.elapsed();
                    let back = format!(
                        "renewed {:?} again after {} of failed attempts",
                        h.name.as_str(),
                        crate::text::duration(after)
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
                let holds = crate::text::duration(holds_for);
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
                    // "failing for" only once it says something ("for <1ms" read as part of
                    // the renewal, not as how long it has been failing).
                    let failing = since.elapsed();
                    let failing = if failing >= Duration::from_secs(1) {
                        format!(" (failing for {})", crate::text::duration(failing))
                    } else {
                        String::new()
                    };
                    report.notice(&format!(
                        "cannot renew lock {:?}{failing}: {why}; the lease holds for {holds} \
                         more, then the command is terminated",
                        h.name.as_str(),
                    ));
                }
                h.due = Instant::now() + next;
            }
            Renewal::Lost(why) => return Err(format!("lock {:?}: {why}", h.name.as_str())),
        }
    }
    Ok(())
}

/// Releases every lock; returns why the first one found no longer held was lost, if any was. The
/// run ended before this call: a lease that surely held only until before it, and whose release
/// cannot reach its server, counts as lost (nothing shows the run held it to its end).
pub(crate) fn release_all(held: Vec<Held>, end: &RunEnd, report: &Reporter) -> Option<String> {
    let ended = Instant::now();
    let mut lost = None;
    for h in held {
        let name = h.name.clone();
        let held_until = h.lease.surely_held_until();
        match h.lease.release(end) {
            Ok(Released::Held) => report.event(&format!("released {:?}", name.as_str())),
            Ok(Released::Lost(why)) => {
                report.event(&format!(
                    "released {:?}, which was no longer ours",
                    name.as_str()
                ));
                lost.get_or_insert(format!("lock {:?}: {why}", name.as_str()));
            }
            Err(e) if held_until.is_some_and(|until| until < ended) => {
                report.error(&format!(
                    "could not release lock {:?}: {e:#}",
                    name.as_str()
                ));
                let late = ended - held_until.unwrap_or(ended);
                lost.get_or_insert(format!(
                    "lock {:?}: the run went on {} past the last renewal the server confirmed, \
                     and the server could not be reached since",
                    name.as_str(),
                    crate::text::duration(late)
                ));
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

pub(super) fn release_quietly(held: Vec<Held>) {
    for h in held {
        let _ = h.lease.release(&RunEnd::NOT_RUN);
    }
}

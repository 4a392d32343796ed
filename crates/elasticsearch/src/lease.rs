//! A held lock: the holder's entry in the lock's document, renewed every ttl/3 by a scripted
//! update that extends it by the node's clock (the timing is lease_clock.rs's); one taken with
//! `--min-hold` is marked ended rather than taken out at its release, until the min-hold's end.

use dlock_core::error;
use std::time::{Duration, Instant};

use serde_json::json;

use super::recipe::{lock, Fault, Outcome, Shared, GRACE, RELEASE, RENEW};
use dlock_core::backend::lease_clock::{Due, LeaseClock};
use dlock_core::backend::{Lease, Released, Renewal};
use dlock_core::lock::{LockName, LockRequest, RunEnd, Token};

/// Longest one renewal attempt may wait for its answer: the supervisor renews from the thread
/// that also forwards signals and reaps the command.
const MAX_RENEW_ATTEMPT: Duration = Duration::from_secs(1);

pub(super) struct EsLease {
    store: Shared,
    name: LockName,
    owner: String,
    token: Token,
    ttl: Duration,
    clock: LeaseClock,
    /// Taken with `--min-hold`.
    kept: bool,
    shown: String,
}

impl EsLease {
    /// The lease `request` was granted with `token`, by an update sent at `sent`.
    pub(super) fn granted(
        store: Shared,
        request: &LockRequest,
        token: Token,
        sent: Instant,
    ) -> EsLease {
        let shown = lock(&store).shown.clone();
        EsLease {
            store,
            name: request.name.clone(),
            owner: request.owner.clone(),
            token,
            ttl: request.ttl,
            clock: LeaseClock::new(request.ttl, sent),
            kept: request.min_hold.is_some(),
            shown,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Lease for EsLease {
    fn token(&self) -> Token {
        self.token
    }

    fn surely_held_until(&self) -> Option<Instant> {
        Some(self.clock.deadline())
    }

    fn renew(&mut self) -> Renewal {
        let shown = self.shown.clone();
        let (sent, left) = match self.clock.due() {
            Due::Not(renewal) => return renewal,
            Due::TooLate(trouble) => {
                let why = format!(
                    "no renewal reached elasticsearch at {shown} before the lease ran out{}",
                    trouble.map_or(String::new(), |t| format!(" ({t})"))
                );
                return self.clock.lose(why);
            }
            Due::Now { sent, left } => (sent, left),
        };
        let params = json!({
            "owner": self.owner,
            "ttl": millis(self.ttl),
            "grace": millis(GRACE),
        });
        let answer = {
            let mut store = lock(&self.store);
            // A third of the ttl (a node's write waits for its translog's fsync, and a loaded
            // JVM answers in tens of milliseconds more): the next is due by then anyway.
            let attempt = store
                .connect_timeout()
                .min(self.ttl / 3)
                .min(MAX_RENEW_ATTEMPT)
                .min(left);
            store.update(&self.name, RENEW, params, false, attempt)
        };
        match answer {
            Ok(Outcome::Written(doc)) if doc.holder(&self.owner).is_some() => {
                self.clock.confirm(sent)
            }
            Ok(_) => self.clock.lose(format!(
                "it is no longer ours on elasticsearch at {shown} (the lease expired, or `dlock \
                 release --force` or another client took it out)"
            )),
            Err(Fault::Refused(message)) => self.clock.lose(format!(
                "elasticsearch at {shown} refused the renewal: {message}"
            )),
            Err(f) => {
                let why = match f {
                    Fault::Unreachable(why) => format!("elasticsearch at {shown}: {why}"),
                    _ => format!("elasticsearch at {shown}: interrupted"),
                };
                match self.clock.unconfirmed(why.clone()) {
                    Some(unconfirmed) => unconfirmed,
                    None => self.clock.lose(format!(
                        "no renewal reached elasticsearch before the lease ran out ({why})"
                    )),
                }
            }
        }
    }

    fn release(self: Box<Self>, end: &RunEnd) -> error::Result<Released> {
        let lost = self.clock.lost().is_some();
        let mut store = lock(&self.store);
        let budget = if lost {
            store.connect_timeout().min(Duration::from_millis(250))
        } else {
            store.connect_timeout()
        };
        let params = json!({
            "owner": self.owner,
            // `end.keep` false: the min-hold keeps nothing, the lock goes at once.
            "keep": self.kept && !lost && end.keep,
            "ending": end.ending.to_wire(),
            "success": end.ending.succeeded(),
            "grace": millis(GRACE),
        });
        let answer = store.update(&self.name, RELEASE, params, false, budget);
        drop(store);
        let ours = match answer {
            Ok(Outcome::Written(doc)) => doc.reply.as_deref() == Some("held"),
            Ok(Outcome::Unchanged(_) | Outcome::Missing) => false,
            Err(f) => {
                return Err(f
                    .into_error(&self.shown)
                    .context(format!("cannot release lock {:?}", self.name.as_str())))
            }
        };
        if ours {
            return Ok(Released::Held);
        }
        Ok(Released::Lost(self.clock.lost().map_or_else(
            || {
                "it was no longer ours when released (the lease expired, or it was taken out)"
                    .into()
            },
            str::to_owned,
        )))
    }
}

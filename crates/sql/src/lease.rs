//! A held lock's row on a SQL server, renewed every ttl/3 by the server's clock (the timing is
//! lease_clock.rs's): what a renewal or release that failed tells the user. The backend supplies
//! the statement.

use std::time::{Duration, Instant};

use super::Fault;
use dlock_core::backend::lease_clock::{Due, LeaseClock};
use dlock_core::backend::{Released, Renewal};

/// The renewal state of one held row.
pub struct Renewing {
    /// `postgres`, `mysql`: for messages, with `shown`, the server's address without a password.
    backend: &'static str,
    shown: String,
    clock: LeaseClock,
}

impl Renewing {
    /// A lease of `ttl` granted by a statement sent at `sent`.
    pub fn new(backend: &'static str, shown: String, ttl: Duration, sent: Instant) -> Renewing {
        Renewing {
            backend,
            shown,
            clock: LeaseClock::new(ttl, sent),
        }
    }

    /// Until when the lease surely holds, by this side's clock.
    pub fn deadline(&self) -> Instant {
        self.clock.deadline()
    }

    pub fn is_lost(&self) -> bool {
        self.clock.lost().is_some()
    }

    /// Renews when due with `attempt`, given how long the lease holds yet (an attempt must give up
    /// within that): `Ok(true)` extended, `Ok(false)` the row is no longer this holder's.
    pub fn renew<C>(
        &mut self,
        attempt: impl FnOnce(Duration) -> Result<bool, Fault<C>>,
    ) -> Renewal {
        let (backend, shown) = (self.backend, self.shown.clone());
        let (sent, left) = match self.clock.due() {
            Due::Not(renewal) => return renewal,
            Due::TooLate(trouble) => {
                let why = format!(
                    "no renewal reached {backend} at {shown} before the lease ran out{}",
                    trouble.map_or(String::new(), |t| format!(" ({t})"))
                );
                return self.clock.lose(why);
            }
            Due::Now { sent, left } => (sent, left),
        };
        match attempt(left) {
            Ok(true) => self.clock.confirm(sent),
            Ok(false) => self.clock.lose(format!(
                "it is no longer ours on {backend} at {shown} (the lease expired, or `dlock \
                 release --force` or another client deleted it)"
            )),
            Err(Fault::Refused { message, .. }) => self.clock.lose(format!(
                "{backend} at {shown} refused the renewal: {message}"
            )),
            Err(f) => {
                let why = format!("{backend} at {shown}: {}", f.message());
                match self.clock.unconfirmed(why.clone()) {
                    Some(unconfirmed) => unconfirmed,
                    None => self.clock.lose(format!(
                        "no renewal reached {backend} before the lease ran out ({why})"
                    )),
                }
            }
        }
    }

    /// What a release found, from whether the row was still this holder's.
    pub fn released(&self, ours: bool) -> Released {
        if ours {
            return Released::Held;
        }
        Released::Lost(self.clock.lost().map_or_else(
            || "it was no longer ours when released (the lease expired, or it was deleted)".into(),
            str::to_owned,
        ))
    }
}

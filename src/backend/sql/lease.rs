//! A held lock's row on a SQL server, renewed every ttl/3 by the server's clock: when a renewal is
//! due, how long the lease surely holds by this side's clock, and what a renewal or release that
//! failed tells the user. The backend supplies the statement.

use std::time::{Duration, Instant};

use super::Fault;
use crate::backend::{Released, Renewal};

/// How much sooner than the server this side counts a lease as over: clocks that run at slightly
/// different rates (1%) and the time a reply takes to be read (2 ms).
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The renewal state of one held row.
pub struct Renewing {
    /// `postgres`, `mysql`: for messages, with `shown`, the server's address without a password.
    backend: &'static str,
    shown: String,
    ttl: Duration,
    /// When the lease surely still holds until, by this side's clock: from the send time of the
    /// last statement the server confirmed it with.
    deadline: Instant,
    confirmed: Instant,
    /// Why the last renewal did not get through, while the lease may still hold.
    trouble: Option<String>,
    lost: Option<String>,
}

impl Renewing {
    /// A lease of `ttl` granted by a statement sent at `sent`.
    pub fn new(backend: &'static str, shown: String, ttl: Duration, sent: Instant) -> Renewing {
        Renewing {
            backend,
            shown,
            ttl,
            deadline: sent + ttl.saturating_sub(drift(ttl)),
            confirmed: sent,
            trouble: None,
            lost: None,
        }
    }

    pub fn is_lost(&self) -> bool {
        self.lost.is_some()
    }

    /// Renews when due with `attempt`, given how long the lease holds yet (an attempt must give up
    /// within that): `Ok(true)` extended, `Ok(false)` the row is no longer this holder's.
    pub fn renew<C>(
        &mut self,
        attempt: impl FnOnce(Duration) -> Result<bool, Fault<C>>,
    ) -> Renewal {
        if let Some(why) = &self.lost {
            return Renewal::Lost(why.clone());
        }
        let (ttl, backend, shown) = (self.ttl, self.backend, self.shown.clone());
        if let Some(held) = Renewal::not_due(self.confirmed, ttl, self.trouble.is_some()) {
            return held;
        }
        let sent = Instant::now();
        let left = self.deadline.saturating_duration_since(sent);
        if left.is_zero() {
            let why = format!(
                "no renewal reached {backend} at {shown} before the lease ran out{}",
                self.trouble
                    .as_ref()
                    .map_or(String::new(), |t| format!(" ({t})"))
            );
            return self.lose(why);
        }
        match attempt(left) {
            Ok(true) => {
                self.deadline = sent + ttl.saturating_sub(drift(ttl));
                self.confirmed = sent;
                self.trouble = None;
                Renewal::Held { next: ttl / 3 }
            }
            Ok(false) => self.lose(format!(
                "it is no longer ours on {backend} at {shown} (the lease expired, or `dlock \
                 release --force` or another client deleted it)"
            )),
            Err(Fault::Refused { message, .. }) => self.lose(format!(
                "{backend} at {shown} refused the renewal: {message}"
            )),
            Err(f) => {
                let why = format!("{backend} at {shown}: {}", f.message());
                self.trouble = Some(why.clone());
                match Renewal::unconfirmed_until(self.deadline, ttl, why.clone()) {
                    Some(unconfirmed) => unconfirmed,
                    None => self.lose(format!(
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
        Released::Lost(self.lost.clone().unwrap_or_else(|| {
            "it was no longer ours when released (the lease expired, or it was deleted)".into()
        }))
    }

    fn lose(&mut self, why: String) -> Renewal {
        self.lost = Some(why.clone());
        Renewal::Lost(why)
    }
}

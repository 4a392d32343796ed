//! The clock of a lease a server grants for a ttl and this side renews (Redis, the SQL servers):
//! until when it surely holds by this side's monotonic clock, when the next renewal is due, why
//! the last one did not get through, and why the lock was lost once it was. The backend sends
//! the renewals and words what the server said; this keeps the time.

use std::time::{Duration, Instant};

use super::Renewal;

/// How much sooner than the server this side counts a lease as over: clocks that run at slightly
/// different rates (1%) and the time a reply takes to be read (2 ms).
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// What a renewal should do now.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    /// Nothing to send: held until the next renewal is due, or lost already.
    Not(Renewal),
    /// No renewal got through before the deadline: the lease may have run out. Why the last
    /// attempt failed, when one did.
    TooLate(Option<String>),
    /// Renew now: the attempt is `sent` now and must give up within `left`.
    Now { sent: Instant, left: Duration },
}

/// The renewal state of one held lease.
#[derive(Debug)]
pub struct LeaseClock {
    ttl: Duration,
    /// After this the lease may have run out on the server: the send time of the last request it
    /// confirmed, plus the ttl, minus the drift margin.
    deadline: Instant,
    /// When the request behind the last confirmation (acquisition or renewal) was sent.
    confirmed: Instant,
    /// Why the last renewal did not get through, while the lease may still hold.
    trouble: Option<String>,
    /// Why the lock was lost, once it was: from then on, never renew again.
    lost: Option<String>,
}

impl LeaseClock {
    /// A lease of `ttl` granted by a request sent at `sent`.
    pub fn new(ttl: Duration, sent: Instant) -> LeaseClock {
        LeaseClock {
            ttl,
            deadline: sent + ttl.saturating_sub(drift(ttl)),
            confirmed: sent,
            trouble: None,
            lost: None,
        }
    }

    /// Until when the lease surely holds, by this side's clock.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Why the lock was lost, if it was.
    pub fn lost(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    /// Whether to renew now. Nothing is due a third of the ttl after the last confirmation when
    /// the last attempt had no trouble: the heartbeat's first call comes right after the
    /// acquisition, which was as good as a renewal.
    pub fn due(&self) -> Due {
        if let Some(why) = &self.lost {
            return Due::Not(Renewal::Lost(why.clone()));
        }
        let next = self.confirmed + self.ttl / 3;
        let now = Instant::now();
        if now < next && self.trouble.is_none() {
            return Due::Not(Renewal::Held { next: next - now });
        }
        let left = self.deadline.saturating_duration_since(now);
        if left.is_zero() {
            return Due::TooLate(self.trouble.clone());
        }
        Due::Now { sent: now, left }
    }

    /// The server confirmed the renewal sent at `sent`: renew again after a third of the ttl.
    pub fn confirm(&mut self, sent: Instant) -> Renewal {
        self.deadline = sent + self.ttl.saturating_sub(drift(self.ttl));
        self.confirmed = sent;
        self.trouble = None;
        Renewal::Held { next: self.ttl / 3 }
    }

    /// A renewal that did not get through, for `why`: try again soon (a tenth of the ttl, 10 to
    /// 500 ms), never sleeping past the deadline, so the next call reports the loss in time.
    /// `None` once the deadline has passed: the caller loses the lock.
    pub fn unconfirmed(&mut self, why: String) -> Option<Renewal> {
        self.trouble = Some(why.clone());
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let retry = (self.ttl / 10).clamp(Duration::from_millis(10), Duration::from_millis(500));
        Some(Renewal::Unconfirmed {
            next: retry.min(left),
            holds_for: left,
            why,
        })
    }

    /// The lock is lost, for `why`: every later renewal says so without asking the server.
    pub fn lose(&mut self, why: String) -> Renewal {
        self.lost = Some(why.clone());
        Renewal::Lost(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    #[test]
    fn a_fresh_lease_is_not_due_for_a_third_of_its_ttl() {
        let clock = LeaseClock::new(TTL, Instant::now());
        match clock.due() {
            Due::Not(Renewal::Held { next }) => assert!(next <= TTL / 3 && next > TTL / 4),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_deadline_leaves_a_margin_for_drift() {
        let sent = Instant::now();
        let clock = LeaseClock::new(TTL, sent);
        assert_eq!(
            clock.deadline(),
            sent + TTL - Duration::from_millis(302),
            "1% of 30s plus 2ms"
        );
    }

    #[test]
    fn a_lease_a_third_old_is_due_now() {
        let clock = LeaseClock::new(TTL, Instant::now() - TTL / 2);
        match clock.due() {
            Due::Now { left, .. } => assert!(left < TTL / 2 && left > TTL / 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_confirmation_moves_the_deadline_and_clears_the_trouble() {
        let mut clock = LeaseClock::new(TTL, Instant::now() - TTL / 2);
        assert!(clock.unconfirmed("timed out".into()).is_some());
        let sent = Instant::now();
        assert_eq!(clock.confirm(sent), Renewal::Held { next: TTL / 3 });
        assert_eq!(clock.deadline(), sent + TTL - drift(TTL));
        assert!(matches!(clock.due(), Due::Not(Renewal::Held { .. })));
    }

    #[test]
    fn after_trouble_a_renewal_is_due_at_once_and_retried_soon() {
        let mut clock = LeaseClock::new(TTL, Instant::now());
        match clock.unconfirmed("connection refused".into()) {
            Some(Renewal::Unconfirmed {
                next,
                holds_for,
                why,
            }) => {
                assert_eq!(
                    next,
                    Duration::from_millis(500),
                    "a tenth of the ttl, at most 500ms"
                );
                assert!(holds_for > TTL / 2);
                assert_eq!(why, "connection refused");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(clock.due(), Due::Now { .. }));
    }

    #[test]
    fn past_the_deadline_it_is_too_late_with_the_last_trouble() {
        let mut clock = LeaseClock::new(TTL, Instant::now() - TTL);
        assert_eq!(clock.due(), Due::TooLate(None));
        assert_eq!(clock.unconfirmed("reset".into()), None);
        assert_eq!(clock.due(), Due::TooLate(Some("reset".into())));
    }

    #[test]
    fn a_lost_lease_stays_lost() {
        let mut clock = LeaseClock::new(TTL, Instant::now() - TTL);
        assert_eq!(clock.lose("gone".into()), Renewal::Lost("gone".into()));
        assert_eq!(clock.lost(), Some("gone"));
        assert_eq!(clock.due(), Due::Not(Renewal::Lost("gone".into())));
    }
}

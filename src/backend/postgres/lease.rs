//! A held lock: its row in `<prefix>locks`, renewed every ttl/3 by the server's clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::{lock, Fault, Shared};
use super::recipe::Recipe;
use crate::backend::{Lease, Released, Renewal};
use crate::lock::{LockName, LockRequest, Token};

/// Longest one renewal attempt may wait for its answer: the supervisor renews from the thread
/// that also forwards signals and reaps the command.
const MAX_RENEW_ATTEMPT: Duration = Duration::from_secs(1);

/// How much sooner than the server this side counts a lease as over: clocks that run at slightly
/// different rates (1%) and the time a reply takes to be read (2 ms).
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

pub struct PgLease {
    pub conn: Shared,
    pub recipe: Arc<Recipe>,
    pub name: LockName,
    pub owner: String,
    pub token: Token,
    pub ttl: Duration,
    /// When the lease surely still holds until, by this side's clock: from the send time of the
    /// last statement the server confirmed it with.
    pub deadline: Instant,
    pub confirmed: Instant,
    pub trouble: Option<String>,
    pub lost: Option<String>,
    /// Taken with `--min-hold`: the row stays until its end, past the release.
    pub kept: bool,
}

impl PgLease {
    pub fn new(
        conn: Shared,
        recipe: Arc<Recipe>,
        name: LockName,
        owner: String,
        token: Token,
        ttl: Duration,
        sent: Instant,
    ) -> PgLease {
        PgLease {
            conn,
            recipe,
            name,
            owner,
            token,
            ttl,
            deadline: sent + ttl.saturating_sub(drift(ttl)),
            confirmed: sent,
            trouble: None,
            lost: None,
            kept: false,
        }
    }

    /// The lease `request` was granted with `token` (asked at `sent`).
    pub fn granted(
        conn: Shared,
        recipe: Arc<Recipe>,
        request: &LockRequest,
        token: Token,
        sent: Instant,
    ) -> PgLease {
        let (name, owner) = (request.name.clone(), request.owner.clone());
        PgLease {
            kept: request.min_hold.is_some(),
            ..PgLease::new(conn, recipe, name, owner, token, request.ttl, sent)
        }
    }

    fn lose(&mut self, why: String) -> Renewal {
        self.lost = Some(why.clone());
        Renewal::Lost(why)
    }

    fn where_(&self) -> String {
        lock(&self.conn).url().shown.clone()
    }
}

impl Lease for PgLease {
    fn token(&self) -> Token {
        self.token
    }

    fn renew(&mut self) -> Renewal {
        if let Some(why) = &self.lost {
            return Renewal::Lost(why.clone());
        }
        let ttl = self.ttl;
        let sent = Instant::now();
        // The first call comes right after the acquisition, which was as good as a renewal.
        let due = self.confirmed + ttl / 3;
        if sent < due && self.trouble.is_none() {
            return Renewal::Held { next: due - sent };
        }
        let left = self.deadline.saturating_duration_since(sent);
        if left.is_zero() {
            let why = format!(
                "no renewal reached postgres at {} before the lease ran out{}",
                self.where_(),
                self.trouble
                    .as_ref()
                    .map_or(String::new(), |t| format!(" ({t})"))
            );
            return self.lose(why);
        }
        let mut conn = lock(&self.conn);
        let attempt = conn
            .connect_timeout()
            .min(ttl / 5)
            .min(MAX_RENEW_ATTEMPT)
            .min(left);
        let result = self
            .recipe
            .renew(&mut conn, attempt, &self.name, &self.owner, ttl, self.kept);
        let shown = conn.url().shown.clone();
        drop(conn);
        match result {
            Ok(true) => {
                self.deadline = sent + ttl.saturating_sub(drift(ttl));
                self.confirmed = sent;
                self.trouble = None;
                Renewal::Held { next: ttl / 3 }
            }
            Ok(false) => self.lose(format!(
                "it is no longer ours on postgres at {shown} (the lease expired, or \
                 `dlock release --force` or another client deleted it)"
            )),
            Err(Fault::Refused { message, .. }) => self.lose(format!(
                "postgres at {shown} refused the renewal: {message}"
            )),
            Err(f) => {
                let why = format!("postgres at {shown}: {}", f.message());
                self.trouble = Some(why.clone());
                match Renewal::unconfirmed_until(self.deadline, ttl, why.clone()) {
                    Some(unconfirmed) => unconfirmed,
                    None => self.lose(format!(
                        "no renewal reached postgres before the lease ran out ({why})"
                    )),
                }
            }
        }
    }

    fn release(self: Box<Self>) -> anyhow::Result<Released> {
        let mut conn = lock(&self.conn);
        let budget = if self.lost.is_some() {
            conn.connect_timeout().min(Duration::from_millis(250))
        } else {
            conn.connect_timeout()
        };
        if self.kept && self.lost.is_none() {
            match self
                .recipe
                .let_go(&mut conn, budget, &self.name, &self.owner)
            {
                Ok(true) => return Ok(Released::Held),
                // The min-hold is over (or the lock lost): as without one.
                Ok(false) => {}
                Err(f) => {
                    return Err(conn
                        .error(f)
                        .context(format!("cannot release lock {:?}", self.name.as_str())))
                }
            }
        }
        match self
            .recipe
            .release(&mut conn, budget, &self.name, &self.owner)
        {
            Ok(true) => Ok(Released::Held),
            Ok(false) => Ok(Released::Lost(self.lost.clone().unwrap_or_else(|| {
                "it was no longer ours when released (the lease expired, or it was deleted)".into()
            }))),
            Err(f) => Err(conn
                .error(f)
                .context(format!("cannot release lock {:?}", self.name.as_str()))),
        }
    }
}

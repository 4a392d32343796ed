//! A held lock: its row in `<prefix>locks`, renewed every ttl/3 by the server's clock, and its lock
//! key, held by the connection's session for whoever waits behind it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::{lock, Fault, Shared};
use super::recipe::Recipe;
use crate::backend::{Lease, Released, Renewal};
use crate::lock::{LockName, Token};

/// How much sooner than the server this side counts a lease as over: clocks that run at slightly
/// different rates (1%) and the time a reply takes to be read (2 ms).
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

pub struct MyLease {
    conn: Shared,
    recipe: Arc<Recipe>,
    name: LockName,
    owner: String,
    token: Token,
    ttl: Duration,
    /// When the lease surely still holds until, by this side's clock: from the send time of the
    /// last statement the server confirmed it with.
    deadline: Instant,
    confirmed: Instant,
    trouble: Option<String>,
    lost: Option<String>,
}

impl MyLease {
    pub fn new(
        conn: Shared,
        recipe: Arc<Recipe>,
        request: &crate::lock::LockRequest,
        token: Token,
        sent: Instant,
    ) -> MyLease {
        let ttl = request.ttl;
        MyLease {
            conn,
            recipe,
            name: request.name.clone(),
            owner: request.owner.clone(),
            token,
            ttl,
            deadline: sent + ttl.saturating_sub(drift(ttl)),
            confirmed: sent,
            trouble: None,
            lost: None,
        }
    }

    fn lose(&mut self, why: String) -> Renewal {
        self.lost = Some(why.clone());
        Renewal::Lost(why)
    }
}

impl Lease for MyLease {
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
        let mut conn = lock(&self.conn);
        let shown = conn.url().shown.clone();
        if self.deadline.saturating_duration_since(sent).is_zero() {
            drop(conn);
            let why = format!(
                "no renewal reached mysql at {shown} before the lease ran out{}",
                self.trouble
                    .as_ref()
                    .map_or(String::new(), |t| format!(" ({t})"))
            );
            return self.lose(why);
        }
        // Each call is bounded by the connection's read timeout, at most a fifth of the ttl.
        let result = self.recipe.renew(&mut conn, &self.name, &self.owner, ttl);
        drop(conn);
        match result {
            Ok(true) => {
                self.deadline = sent + ttl.saturating_sub(drift(ttl));
                self.confirmed = sent;
                self.trouble = None;
                Renewal::Held { next: ttl / 3 }
            }
            Ok(false) => self.lose(format!(
                "it is no longer ours on mysql at {shown} (the lease expired, or `dlock release \
                 --force` or another client deleted it)"
            )),
            Err(Fault::Refused { message, .. }) => {
                self.lose(format!("mysql at {shown} refused the renewal: {message}"))
            }
            Err(f) => {
                let why = format!("mysql at {shown}: {}", f.message());
                self.trouble = Some(why.clone());
                match Renewal::unconfirmed_until(self.deadline, ttl, why.clone()) {
                    Some(unconfirmed) => unconfirmed,
                    None => self.lose(format!(
                        "no renewal reached mysql before the lease ran out ({why})"
                    )),
                }
            }
        }
    }

    fn release(self: Box<Self>) -> anyhow::Result<Released> {
        let mut conn = lock(&self.conn);
        match self.recipe.release(&mut conn, &self.name, &self.owner) {
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

//! A held lock: its row in `<prefix>locks`, renewed every ttl/3 by the server's clock (see
//! `sql::lease`); one taken with `--min-hold` is let go rather than deleted at its release.

use dlock_core::error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::{lock, Shared};
use super::recipe::Recipe;
use crate::lease::Renewing;
use crate::runs::Started;
use dlock_core::backend::{Lease, Released, Renewal};
use dlock_core::lock::{LockName, LockRequest, RunEnd, Token};

/// Longest one renewal attempt may wait for its answer: the supervisor renews from the thread
/// that also forwards signals and reaps the command.
const MAX_RENEW_ATTEMPT: Duration = Duration::from_secs(1);

pub struct PgLease {
    conn: Shared,
    recipe: Arc<Recipe>,
    name: LockName,
    owner: String,
    token: Token,
    ttl: Duration,
    renewing: Renewing,
    /// Taken with `--min-hold`: the row stays until its end, past the release.
    kept: bool,
    /// Granted free, to a lock nobody held or waited for (see `Recipe::release`).
    free: bool,
    /// The record of this run its grant wrote as the last run (`None`: none was answered).
    run: Option<Started>,
    /// The lock's group record, read just after the grant (see `Recipe::acquire`).
    group: Option<Option<String>>,
}

impl PgLease {
    /// The lease `request` was granted with `token` (asked at `sent`; `free`: to a lock nobody
    /// held or waited for; `run`: the record of the run the grant wrote).
    pub fn granted(
        conn: Shared,
        recipe: Arc<Recipe>,
        request: &LockRequest,
        (token, free, run, group): (Token, bool, Option<Started>, Option<Option<String>>),
        sent: Instant,
    ) -> PgLease {
        let shown = lock(&conn).url().shown.clone();
        PgLease {
            conn,
            recipe,
            name: request.name.clone(),
            owner: request.owner.clone(),
            token,
            ttl: request.ttl,
            renewing: Renewing::new("postgres", shown, request.ttl, sent),
            kept: request.min_hold.is_some(),
            free,
            run,
            group,
        }
    }
}

impl Lease for PgLease {
    fn token(&self) -> Token {
        self.token
    }

    fn surely_held_until(&self) -> Option<Instant> {
        Some(self.renewing.deadline())
    }

    fn group_record(&self) -> Option<Option<String>> {
        self.group.clone()
    }

    fn renew(&mut self) -> Renewal {
        let ttl = self.ttl;
        let (shared, recipe) = (&self.conn, &self.recipe);
        let (name, owner, kept) = (&self.name, &self.owner, self.kept);
        self.renewing.renew(|left| {
            let mut conn = lock(shared);
            let attempt = conn
                .connect_timeout()
                .min(ttl / 5)
                .min(MAX_RENEW_ATTEMPT)
                .min(left);
            recipe.renew(&mut conn, attempt, name, owner, ttl, kept)
        })
    }

    fn release(self: Box<Self>, end: &RunEnd) -> error::Result<Released> {
        let ended = (self.run.as_ref(), end);
        let mut conn = lock(&self.conn);
        let lost = self.renewing.is_lost();
        let budget = if lost {
            conn.connect_timeout().min(Duration::from_millis(250))
        } else {
            conn.connect_timeout()
        };
        // `end.keep` false: the min-hold keeps nothing, the lock goes at once.
        if self.kept && !lost && end.keep {
            match self
                .recipe
                .let_go(&mut conn, budget, &self.name, &self.owner, ended)
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
            .release(&mut conn, budget, &self.name, &self.owner, self.free, ended)
        {
            Ok(ours) => Ok(self.renewing.released(ours)),
            Err(f) => Err(conn
                .error(f)
                .context(format!("cannot release lock {:?}", self.name.as_str()))),
        }
    }
}

//! A held lock: its row in `<prefix>locks`, renewed every ttl/3 by the server's clock (see
//! `sql::lease`), and its lock key, held by the connection's session for whoever waits behind it.

use dlock_core::error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::{lock, within, Shared};
use super::recipe::Recipe;
use crate::lease::Renewing;
use crate::runs::Started;
use dlock_core::backend::{Lease, Released, Renewal};
use dlock_core::lock::{LockName, LockRequest, RunEnd, Token};

pub struct MyLease {
    conn: Shared,
    recipe: Arc<Recipe>,
    name: LockName,
    owner: String,
    token: Token,
    ttl: Duration,
    renewing: Renewing,
    /// The record of this run its grant wrote as the last run (`None`: none was answered).
    run: Option<Started>,
}

impl MyLease {
    /// The lease `request` was granted with `token` (asked at `sent`; `run`: the record of the
    /// run the grant wrote).
    pub fn new(
        conn: Shared,
        recipe: Arc<Recipe>,
        request: &LockRequest,
        (token, run): (Token, Option<Started>),
        sent: Instant,
    ) -> MyLease {
        let shown = lock(&conn).url().shown.clone();
        MyLease {
            conn,
            recipe,
            name: request.name.clone(),
            owner: request.owner.clone(),
            token,
            ttl: request.ttl,
            renewing: Renewing::new("mysql", shown, request.ttl, sent),
            run,
        }
    }
}

impl Lease for MyLease {
    fn token(&self) -> Token {
        self.token
    }

    fn surely_held_until(&self) -> Option<Instant> {
        Some(self.renewing.deadline())
    }

    fn renew(&mut self) -> Renewal {
        let (recipe, ttl) = (self.recipe.clone(), self.ttl);
        let (name, owner) = (self.name.clone(), self.owner.clone());
        // Each read is bounded by the connection's read timeout (a fifth of the ttl), the whole
        // call by what is left of the lease: the command is stopped at its end, not after it.
        self.renewing.renew(|left| {
            within(&self.conn, left, move |conn| {
                conn.renewing(|conn| recipe.renew(conn, &name, &owner, ttl))
            })
        })
    }

    fn release(self: Box<Self>, end: &RunEnd) -> error::Result<Released> {
        let mut conn = lock(&self.conn);
        let ended = (self.run.as_ref(), end);
        match self
            .recipe
            .release(&mut conn, &self.name, &self.owner, ended)
        {
            Ok(ours) => Ok(self.renewing.released(ours)),
            Err(f) => Err(conn
                .error(f)
                .context(format!("cannot release lock {:?}", self.name.as_str()))),
        }
    }
}

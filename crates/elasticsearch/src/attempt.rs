//! One attempt to acquire: the acquire script's parameters, and what its answer says (granted,
//! with the token, or busy, with the document as the node has it).

use std::time::Duration;

use serde_json::json;

use super::doc::Doc;
use super::recipe::{lock, Fault, Outcome, Shared, ACQUIRE, GRACE};
use dlock_core::lock::{LockRequest, Token};

/// Who this dlock is, for its entries.
pub(super) struct Me {
    pub pid: u32,
    pub host: String,
}

/// What an attempt found.
pub(super) enum Tried {
    Granted(Token),
    Busy(Box<Doc>),
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One attempt at `request`; `wait`: taking (or keeping) a place in line when busy.
pub(super) fn attempt(
    store: &Shared,
    request: &LockRequest,
    me: &Me,
    wait: bool,
    budget: Option<Duration>,
    give_up: &dyn Fn() -> bool,
) -> Result<Tried, Fault> {
    let params = json!({
        "owner": request.owner,
        "mode": request.mode.to_wire(),
        "ttl": millis(request.ttl),
        "wait": wait,
        "pid": me.pid,
        "host": me.host,
        "message": request.message,
        "min_hold": request.min_hold.map(millis),
        "grace": millis(GRACE),
        "name": request.name.as_str(),
    });
    let mut store = lock(store);
    let budget = budget.unwrap_or(store.connect_timeout());
    let doc = match store.update_unless(&request.name, ACQUIRE, params, true, budget, give_up)? {
        Outcome::Written(doc) | Outcome::Unchanged(doc) => doc,
        Outcome::Missing => return Err(Fault::Refused("the lock's document went missing".into())),
    };
    match doc.holder(&request.owner) {
        Some(entry) => match entry.holder.token {
            Some(token) => Ok(Tried::Granted(token)),
            None => Err(Fault::Refused(
                "the node granted the lock but its entry does not read".into(),
            )),
        },
        None => Ok(Tried::Busy(Box::new(doc))),
    }
}

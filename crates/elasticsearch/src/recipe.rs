//! The calls dlock makes to the node: each change of a lock is one scripted `_update` of the
//! lock's document (the scripts in recipe/, run by the node on the document's primary shard, one
//! change at a time, with the node's clock `ctx._now`), answered with the document as that update
//! left it; reads are a `GET` of the document, and a listing a `_search` of the index.
//!
//! The index is made on first use with `dynamic: false`, so that nothing a holder writes (a
//! message that looks like a date) can make a field's mapping refuse a later write.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dlock_core::error;
use dlock_core::error::FailAs;
use serde_json::{json, Value};

use super::doc::Doc;
use super::http::{self, Http};
use dlock_core::lock::{escaped, LockName};

/// A script of recipe/: dlock's functions (common.painless), then its own part.
macro_rules! script {
    ($part:literal) => {
        concat!(
            include_str!("recipe/common.painless"),
            include_str!(concat!("recipe/", $part, ".painless"))
        )
    };
}

pub(super) const ACQUIRE: &str = script!("acquire");
pub(super) const RENEW: &str = script!("renew");
pub(super) const RELEASE: &str = script!("release");
pub(super) const LEAVE: &str = script!("leave");
pub(super) const BREAK: &str = script!("break");
pub(super) const GROUP: &str = script!("group");
pub(super) const LOOK: &str = script!("look");

/// How long the node's clock (`ctx._now`, a cached wall clock refreshed every 200 ms by default)
/// may lag behind the time a request reaches it: a holder counts as gone only this long after its
/// lease's end by that clock, so that a lease stamped with a stale clock is never cut short.
pub(super) const GRACE: Duration = Duration::from_millis(500);

/// Most bytes of a lock's document read (its holders and its line).
const MAX_DOC: usize = 4 << 20;
/// Most bytes of a listing read.
const MAX_LISTING: usize = 64 << 20;
/// Most documents a listing reads (the index's default `max_result_window`).
pub(super) const MAX_LISTED: usize = 10_000;

/// Why a call failed.
#[derive(Debug)]
pub(super) enum Fault {
    /// No node answered in time: worth trying again.
    Unreachable(String),
    /// A stop signal came while the call ran.
    Stopped,
    /// The node answered with an error.
    Refused(String),
}

impl From<http::Fault> for Fault {
    fn from(f: http::Fault) -> Fault {
        match f {
            http::Fault::Unreachable(why) => Fault::Unreachable(why),
            http::Fault::Stopped => Fault::Stopped,
        }
    }
}

impl Fault {
    /// The error for the user, naming the node (tagged backend-unavailable).
    pub(super) fn into_error(self, shown: &str) -> error::Error {
        let message = match self {
            Fault::Stopped => {
                return error::Error::internal(dlock_core::backend::stop::INTERRUPTED)
            }
            Fault::Unreachable(why) => format!("cannot reach elasticsearch at {shown}: {why}"),
            Fault::Refused(why) => format!("elasticsearch at {shown}: {why}"),
        };
        match Err::<(), _>(error!("{message}")).unavailable() {
            Err(e) => e,
            Ok(()) => error!("{message}"),
        }
    }
}

/// What an update found.
pub(super) enum Outcome {
    /// The script wrote the document (or made it): as written.
    Written(Doc),
    /// The script wrote nothing: the document as it is.
    Unchanged(Doc),
    /// No such document (or index).
    Missing,
}

/// The connection to the node and the index the locks live in.
pub(super) struct Store {
    http: Http,
    index: String,
    /// The address without credentials, for messages.
    pub shown: String,
}

pub(super) type Shared = Arc<Mutex<Store>>;

/// The store behind `shared` (a panic elsewhere cannot leave it half-changed).
pub(super) fn lock(shared: &Shared) -> MutexGuard<'_, Store> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

impl Store {
    pub(super) fn new(http: Http, index: String, shown: String) -> Store {
        Store { http, index, shown }
    }

    pub(super) fn connect_timeout(&self) -> Duration {
        self.http.connect_timeout()
    }

    fn doc_path(&self, name: &LockName, what: &str) -> String {
        let id = dlock_core::text::percent_encode(name.as_str(), |_, c| {
            !(c.is_ascii_alphanumeric() || "-._~".contains(c))
        });
        format!("/{}/{what}/{id}", self.index)
    }

    /// Runs `script` with `params` on `name`'s document; `make`: as an upsert, making the
    /// document (and the index) where missing.
    pub(super) fn update(
        &mut self,
        name: &LockName,
        script: &str,
        params: Value,
        make: bool,
        budget: Duration,
    ) -> Result<Outcome, Fault> {
        self.update_unless(name, script, params, make, budget, &|| false)
    }

    /// As `update`, given up (`Fault::Stopped`) as soon as `give_up` says so.
    pub(super) fn update_unless(
        &mut self,
        name: &LockName,
        script: &str,
        params: Value,
        make: bool,
        budget: Duration,
        give_up: &dyn Fn() -> bool,
    ) -> Result<Outcome, Fault> {
        let mut started = std::time::Instant::now();
        let path = format!(
            "{}?retry_on_conflict=50&_source=true",
            self.doc_path(name, "_update")
        );
        let mut upsert = false;
        // Bounded: each turn either answers, or makes the index once, or meets a conflict the
        // node's own retries did not resolve, within the budget.
        for _ in 0..20 {
            let left = budget.saturating_sub(started.elapsed());
            let mut body = json!({
                "script": {"lang": "painless", "source": script, "params": &params},
            });
            if upsert {
                body["scripted_upsert"] = json!(true);
                body["upsert"] = json!({});
            }
            let answer = self.http.call_unless(
                "POST",
                &path,
                body.to_string().as_bytes(),
                left,
                MAX_DOC,
                give_up,
            )?;
            let json: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
            match answer.status {
                200 | 201 => {
                    let source = &json["get"]["_source"];
                    if !source.is_object() {
                        return Err(Fault::Refused("an update answered no document".into()));
                    }
                    let doc = Doc::of(source);
                    return Ok(match json["result"].as_str() {
                        Some("noop") => Outcome::Unchanged(doc),
                        _ => Outcome::Written(doc),
                    });
                }
                404 if !make => return Ok(Outcome::Missing),
                404 if !upsert => {
                    // The first write of this name. An `_update` makes a missing index as the
                    // cluster's defaults say (dynamic mappings, a replica it may have no node
                    // for): made or set now, before a document is written. A change of the
                    // cluster's state, slower than any call on a document: it has a budget of its
                    // own, and so has the call after it.
                    self.make_index(self.http.connect_timeout())?;
                    started = std::time::Instant::now();
                    upsert = true;
                }
                409 => continue,
                status => return Err(refused(status, &json)),
            }
        }
        Err(Fault::Unreachable(
            "the document kept changing under the update".into(),
        ))
    }

    /// `name`'s document as it is, if there is one.
    pub(super) fn get(&mut self, name: &LockName, budget: Duration) -> Result<Option<Doc>, Fault> {
        let path = self.doc_path(name, "_doc");
        let answer = self.http.call("GET", &path, b"", budget, MAX_DOC)?;
        let json: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
        match answer.status {
            200 if json["_source"].is_object() => Ok(Some(Doc::of(&json["_source"]))),
            404 => Ok(None),
            status => Err(refused(status, &json)),
        }
    }

    /// Every document of the index (its id and source), the first `MAX_LISTED`, and whether there
    /// were more. The index is refreshed first, so that a lock taken a moment ago is found (a node
    /// that refuses the refresh lists what it has made searchable, within a second).
    pub(super) fn all(&mut self, budget: Duration) -> Result<(Vec<(String, Value)>, bool), Fault> {
        let started = std::time::Instant::now();
        let refresh = format!("/{}/_refresh", self.index);
        self.http.call("POST", &refresh, b"", budget, MAX_DOC)?;
        let search = format!("/{}/_search", self.index);
        let body =
            json!({"size": MAX_LISTED, "track_total_hits": true, "query": {"match_all": {}}});
        let left = budget.saturating_sub(started.elapsed());
        let answer = self.http.call(
            "POST",
            &search,
            body.to_string().as_bytes(),
            left,
            MAX_LISTING,
        )?;
        let json: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
        match answer.status {
            200 => {}
            404 => return Ok((vec![], false)),
            status => return Err(refused(status, &json)),
        }
        let hits = json["hits"]["hits"].as_array().cloned().unwrap_or_default();
        let total = json["hits"]["total"]["value"].as_u64().unwrap_or(0);
        let docs: Vec<(String, Value)> = hits
            .into_iter()
            .filter_map(|hit| Some((hit["_id"].as_str()?.to_owned(), hit["_source"].clone())))
            .collect();
        let cut = usize::try_from(total).map_or(true, |t| t > docs.len());
        Ok((docs, cut))
    }

    /// Makes the index (one shard: a lock's changes meet on one primary anyway; a replica where
    /// the cluster has a second node, none on a single node, which then stays green; no dynamic
    /// mappings), or, where it exists, sets the last two. Setting them is best effort: a user
    /// without the right on the index's settings has it made by one who has (README).
    fn make_index(&mut self, budget: Duration) -> Result<(), Fault> {
        let started = std::time::Instant::now();
        let body = json!({
            "settings": {"number_of_shards": 1, "auto_expand_replicas": "0-1"},
            "mappings": {"dynamic": false, "properties": {"name": {"type": "keyword"}}},
        });
        let path = format!("/{}", self.index);
        let answer = self
            .http
            .call("PUT", &path, body.to_string().as_bytes(), budget, MAX_DOC)?;
        // Made, or there already (or not ours to make: the write after says what is wrong).
        if answer.status == 200 {
            return Ok(());
        }
        for (what, body) in [
            ("_mapping", json!({"dynamic": false})),
            (
                "_settings",
                json!({"index": {"auto_expand_replicas": "0-1"}}),
            ),
        ] {
            let left = budget.saturating_sub(started.elapsed());
            let path = format!("/{}/{what}", self.index);
            self.http
                .call("PUT", &path, body.to_string().as_bytes(), left, MAX_DOC)?;
        }
        Ok(())
    }
}

/// The node's error in a line: what it said, escaped and cut short.
fn refused(status: u16, json: &Value) -> Fault {
    let reason = json["error"]["reason"]
        .as_str()
        .or_else(|| json["error"]["type"].as_str())
        .map_or_else(|| format!("HTTP status {status}"), |r| escaped(r, 200));
    match status {
        401 => Fault::Refused(format!(
            "the node refused the credentials ({reason}): {}",
            dlock_core::url::credentials_hint()
        )),
        403 => Fault::Refused(format!("the node refused dlock the right: {reason}")),
        429 | 502..=504 => Fault::Unreachable(format!("the node is overloaded ({reason})")),
        _ => Fault::Refused(reason),
    }
}

//! The queue recipe, as Apache Curator implements it, so that dlock and Curator clients exclude
//! each other: what kind of place a child node is, the order of the queue, and who owns the lock
//! (an exclusive node when first, a shared one behind no exclusive node, a seat behind no exclusive
//! node and fewer than N seats) or whom a waiter watches. Pure functions of a directory listing.
//!
//! An exclusive holder is a pair of nodes, made in one multi request: `<prefix>lock-N` and its
//! *companion* `<prefix>__WRIT__N+1`, the same protected prefix. Curator's mutex sorts only `lock-`
//! nodes (any other name sorts after its own), its read-write lock only `__READ__` and `__WRIT__`
//! ones, so each recipe sees exactly one node of the pair; dlock counts the pair once, by its
//! `lock-` node. Nothing can come between N and N+1, so whichever of the two a client compares
//! with, the pair stands at the same place in its queue. A seat (`--limit`) is a pair the same way,
//! `__SEAT__N` and a `__READ__N+1` companion, so that Curator's write lock waits for it.
//!
//! A kept node (`--min-hold`, kept.rs) is named `_k_<uuid>-<kind>0000000000`, so that it sorts
//! ahead of every queued node; an exclusive holder's or a seat's has a kept companion the same way.
//! Its name, its companion and which kept nodes a listing has to judge are told here.

use std::collections::HashSet;

use dlock_core::lock::Mode;

const EXCLUSIVE_KIND: &str = "lock-";
const SHARED_KIND: &str = "__READ__";
/// Curator's `InterProcessReadWriteLock` write node, and the kind of an exclusive pair's companion.
const WRITE_KIND: &str = "__WRIT__";
/// What begins a protected name (Curator's `_c_<uuid>-`), as dlock's queue nodes are named.
const PROTECTED: &str = "_c_";
const SEAT_KIND: &str = "__SEAT__";
/// The kinds made in pairs, and the kind of each one's companion.
const PAIRS: [(&str, &str); 2] = [(EXCLUSIVE_KIND, WRITE_KIND), (SEAT_KIND, SHARED_KIND)];
/// kazoo's `ReadLock` (its `Lock` and `WriteLock` use `__lock__`, exclusive like anything unknown).
const KAZOO_SHARED_KIND: &str = "__rlock__";

/// What a child node asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Exclusive,
    Shared,
    Seat,
}

/// A holder's or waiter's node, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Child {
    pub(super) name: String,
    pub(super) sequence: i64,
    pub(super) kind: Kind,
}

impl Child {
    /// Any node ending in a sequence number takes part; one without is no lock node and is ignored,
    /// and so is a lease of kazoo's `Semaphore` (named by a bare `uuid4().hex`, no sequence number:
    /// about one in a hundred ends in ten digits by chance).
    pub(super) fn parse(name: &str) -> Option<Child> {
        if is_kazoo_lease(name) {
            return None;
        }
        let digits = digits(name);
        if digits < 10 {
            return None;
        }
        let (stem, sequence) = name.split_at(name.len() - digits);
        let kind = if stem.ends_with(SHARED_KIND) || stem.ends_with(KAZOO_SHARED_KIND) {
            Kind::Shared
        } else if stem.ends_with(SEAT_KIND) {
            Kind::Seat
        } else {
            // `lock-` (Curator's mutex), `__WRIT__` (Curator's write lock) and anything unknown.
            Kind::Exclusive
        };
        Some(Child {
            name: name.to_owned(),
            sequence: sequence.parse().ok()?,
            kind,
        })
    }
}

/// Whether `name` is a lease of kazoo's `Semaphore` (semaphores.rs): a bare `uuid4().hex`.
pub(super) fn is_kazoo_lease(name: &str) -> bool {
    name.len() == 32 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The lock's nodes in queue order, a pair counted once (by its first node).
pub(super) fn queue(names: &[String]) -> Vec<Child> {
    let all: Vec<Child> = names.iter().filter_map(|n| Child::parse(n)).collect();
    let primaries = pair_keys(&all);
    let paired: Vec<bool> = all
        .iter()
        .map(|c| companion_key(c).is_some_and(|k| primaries.contains(&k)))
        .collect();
    let mut children: Vec<Child> = all
        .iter()
        .zip(paired)
        .filter(|(_, paired)| !paired)
        .map(|(c, _)| c.clone())
        .collect();
    // Kept nodes (`--min-hold`, kept.rs) come before every queued node.
    children.sort_by(|a, b| {
        (!is_kept(&a.name), a.sequence, &a.name).cmp(&(!is_kept(&b.name), b.sequence, &b.name))
    });
    children
}

/// Who a companion is: its protected prefix, sequence number and kind.
type CompanionKey<'a> = (&'a str, i64, &'static str);

/// The key a node's companion would have, if the node is the first of a pair.
fn primary_key(child: &Child) -> Option<CompanionKey<'_>> {
    let stem = &child.name[..child.name.len() - digits(&child.name)];
    let next = child.sequence.checked_add(1)?;
    let (prefix, companion) = pair_stem(stem)?;
    prefix
        .starts_with(PROTECTED)
        .then_some((prefix, next, companion))
}

/// A name without its number cut into its prefix and the kind of its companion, if its kind is
/// made in pairs.
fn pair_stem(stem: &str) -> Option<(&str, &'static str)> {
    PAIRS
        .iter()
        .find_map(|(kind, companion)| Some((stem.strip_suffix(kind)?, *companion)))
}

/// The key of a node that may be a pair's companion.
fn companion_key(child: &Child) -> Option<CompanionKey<'_>> {
    let stem = &child.name[..child.name.len() - digits(&child.name)];
    PAIRS
        .iter()
        .find_map(|(_, companion)| {
            Some((stem.strip_suffix(companion)?, child.sequence, *companion))
        })
        .filter(|(prefix, _, _)| prefix.starts_with(PROTECTED))
}

/// The companion keys of the first nodes of pairs among `children`.
fn pair_keys(children: &[Child]) -> HashSet<CompanionKey<'_>> {
    children.iter().filter_map(primary_key).collect()
}

/// The kind of the companion of a node of kind `kind`, if that kind is made in pairs.
pub(super) fn companion_of_kind(kind: &str) -> Option<&'static str> {
    PAIRS
        .iter()
        .find(|(first, _)| *first == kind)
        .map(|(_, companion)| *companion)
}

/// How many digits `name` ends in.
fn digits(name: &str) -> usize {
    name.bytes().rev().take_while(u8::is_ascii_digit).count()
}

/// The companion of `node` in `names`: the node made with it, if `node` is the first of a pair
/// and its companion is there.
pub(super) fn companion_in(names: &[String], node: &str) -> Option<String> {
    let primary = Child::parse(node)?;
    let key = primary_key(&primary)?;
    names
        .iter()
        .filter_map(|n| Child::parse(n))
        .find(|c| companion_key(c) == Some(key))
        .map(|c| c.name)
}

/// The name of the companion of kind `companion` made with `node` (of kind `kind`): the same
/// protected prefix, the next sequence number.
pub(super) fn companion_name(node: &str, kind: &str, companion: &str) -> Option<String> {
    let child = Child::parse(node)?;
    let stem = &node[..node.len() - digits(node)];
    let prefix = stem.strip_suffix(kind)?;
    Some(format!(
        "{prefix}{companion}{:010}",
        child.sequence.checked_add(1)?
    ))
}

/// What marks a kept node's name (dlock's queue nodes start with Curator's `_c_`).
const KEPT_PREFIX: &str = "_k_";
/// A kept node's number: ahead of every queued node, for dlock and Curator alike.
const KEPT_NUMBER: &str = "0000000000";

/// The name of a kept node of `kind` made with `uuid`.
pub(super) fn kept_name(uuid: &str, kind: &str) -> String {
    format!("{KEPT_PREFIX}{uuid}-{kind}{KEPT_NUMBER}")
}

/// The node beside the node `name` that took its token at its grant (acquisition.rs,
/// `take_token`): `grant.SEQUENCE.x`, SEQUENCE being the last 10 characters of `name`.
pub(super) fn grant_node(name: &str) -> String {
    let sequence = name.get(name.len().saturating_sub(10)..).unwrap_or(name);
    format!("grant.{sequence}.x")
}

/// Whether `name` is a kept node.
pub(super) fn is_kept(name: &str) -> bool {
    name.starts_with(KEPT_PREFIX)
}

/// The companion of the kept node at `path` (a name, or a path ending in one), if it has one: an
/// exclusive holder's kept `lock-` node has a kept `__WRIT__` node beside it, a seat's kept
/// `__SEAT__` node a `__READ__` one, made in the same request, so that Curator's read-write lock
/// waits for the min-hold too.
pub(super) fn kept_companion(path: &str) -> Option<String> {
    let (dir, name) = match path.rsplit_once('/') {
        Some((dir, name)) => (format!("{dir}/"), name),
        None => (String::new(), path),
    };
    let stem = name.strip_suffix(KEPT_NUMBER).filter(|_| is_kept(name))?;
    let (prefix, kind) = pair_stem(stem)?;
    Some(format!("{dir}{prefix}{kind}{KEPT_NUMBER}"))
}

/// The kept nodes among `names` to judge: a companion whose kept `lock-` node is there goes with
/// that node (a lone one keeps the lock by its own record).
pub(super) fn kept_to_judge(names: &[String]) -> Vec<&String> {
    let companions: Vec<String> = names.iter().filter_map(|n| kept_companion(n)).collect();
    names
        .iter()
        .filter(|n| is_kept(n) && !companions.contains(n))
        .collect()
}

/// The paths of the kept node `name` in `dir` and of its companion, if `names` has it.
pub(super) fn kept_with_companion(dir: &str, name: &str, names: &[String]) -> Vec<String> {
    let mut paths = vec![format!("{dir}/{name}")];
    paths.extend(
        kept_companion(name)
            .filter(|c| names.contains(c))
            .map(|c| format!("{dir}/{c}")),
    );
    paths
}

/// Whether the node at `me` owns the lock, and if not, what it waits for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Owns,
    /// Wait for this node to go.
    Watch(String),
    /// Wait for any change among the children (a seat waits for any of N holders).
    WatchChildren,
}

pub(super) fn verdict(queue: &[Child], me: usize, limit: u32) -> Verdict {
    let before = &queue[..me];
    match queue[me].kind {
        Kind::Exclusive => match before.last() {
            None => Verdict::Owns,
            Some(predecessor) => Verdict::Watch(predecessor.name.clone()),
        },
        kind => {
            if let Some(writer) = before.iter().rev().find(|c| c.kind == Kind::Exclusive) {
                return Verdict::Watch(writer.name.clone());
            }
            let seats = before.iter().filter(|c| c.kind == Kind::Seat).count();
            if kind == Kind::Seat && seats >= limit as usize {
                return Verdict::WatchChildren;
            }
            Verdict::Owns
        }
    }
}

/// The node Curator's `InterProcessMutex` lets in among `names`: of the nodes with `lock-` in
/// their name, the one whose name after its last `lock-` sorts first (Curator sorts by that alone,
/// so a kept node, numbered zero, comes first, and no `__READ__` or `__SEAT__` node keeps it out).
pub(super) fn curator_mutex_first(names: &[String]) -> Option<&String> {
    names
        .iter()
        .filter_map(|n| Some((&n[n.rfind(EXCLUSIVE_KIND)? + EXCLUSIVE_KIND.len()..], n)))
        .min()
        .map(|(_, n)| n)
}

/// Indexes of the nodes that own the lock; a seat's limit comes from `limit_of`.
pub(super) fn owners(queue: &[Child], limit_of: impl Fn(usize) -> u32) -> Vec<usize> {
    (0..queue.len())
        .filter(|&i| verdict(queue, i, limit_of(i)) == Verdict::Owns)
        .collect()
}

/// The kind a request's node carries in its name, and the limit its turn is judged by.
pub(super) fn kind_of(mode: Mode) -> (&'static str, u32) {
    match mode {
        Mode::Exclusive => (EXCLUSIVE_KIND, 1),
        Mode::Shared => (SHARED_KIND, 0),
        Mode::Limit(n) => (SEAT_KIND, n),
    }
}

/// The kind of the companion a request's node is made with, if any, for Curator's read-write
/// lock: an exclusive holder's `__WRIT__`, a seat's `__READ__`. (A shared holder's `__READ__` is
/// Curator's read node already.)
pub(super) fn companion_kind(mode: Mode) -> Option<&'static str> {
    companion_of_kind(kind_of(mode).0)
}

#[cfg(test)]
mod tests;

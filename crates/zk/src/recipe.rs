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
mod tests {
    use super::*;

    fn q(names: &[&str]) -> Vec<Child> {
        queue(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn children_sort_by_sequence_and_unknown_kinds_count_as_exclusive() {
        let children = q(&[
            "_c_b-__READ__0000000003",
            "_c_a-lock-0000000001",
            "not-a-lock-node",
            "x-12345-0000000002",
            "_c_c-__WRIT__0000000004",
            "_c_d-__SEAT__0000000005",
            "5f0c2a9e41d34b7c8e6f012345678901",
            "0123456789abcdef__rlock__0000000006",
            "0123456789abcdef__lock__0000000007",
        ]);
        let kinds: Vec<(i64, Kind)> = children.iter().map(|c| (c.sequence, c.kind)).collect();
        assert_eq!(
            kinds,
            [
                (1, Kind::Exclusive),
                (2, Kind::Exclusive),
                (3, Kind::Shared),
                (4, Kind::Exclusive),
                (5, Kind::Seat),
                (6, Kind::Shared),
                (7, Kind::Exclusive)
            ]
        );
    }

    #[test]
    fn exclusive_waiters_watch_only_their_predecessor() {
        let children = q(&[
            "a-lock-0000000001",
            "b-lock-0000000002",
            "c-lock-0000000003",
        ]);
        assert_eq!(verdict(&children, 0, 1), Verdict::Owns);
        assert_eq!(
            verdict(&children, 1, 1),
            Verdict::Watch("a-lock-0000000001".into())
        );
        assert_eq!(
            verdict(&children, 2, 1),
            Verdict::Watch("b-lock-0000000002".into())
        );
    }

    #[test]
    fn readers_share_until_a_writer_queues_and_writers_wait_for_readers() {
        let children = q(&[
            "r1-__READ__0000000001",
            "r2-__READ__0000000002",
            "w-lock-0000000003",
            "r3-__READ__0000000004",
        ]);
        assert_eq!(owners(&children, |_| 1), [0, 1]);
        assert_eq!(
            verdict(&children, 2, 1),
            Verdict::Watch("r2-__READ__0000000002".into())
        );
        assert_eq!(
            verdict(&children, 3, 1),
            Verdict::Watch("w-lock-0000000003".into())
        );
    }

    #[test]
    fn seats_admit_the_first_n_alongside_readers() {
        let children = q(&[
            "s1-__SEAT__0000000001",
            "r-__READ__0000000002",
            "s2-__SEAT__0000000003",
            "s3-__SEAT__0000000004",
        ]);
        assert_eq!(owners(&children, |_| 2), [0, 1, 2]);
        assert_eq!(verdict(&children, 3, 2), Verdict::WatchChildren);
        let behind_writer = q(&["w-lock-0000000001", "s-__SEAT__0000000002"]);
        assert_eq!(
            verdict(&behind_writer, 1, 5),
            Verdict::Watch("w-lock-0000000001".into())
        );
    }

    #[test]
    fn curators_mutex_lets_in_the_first_lock_node_whatever_stands_before_it() {
        let names: Vec<String> = [
            "_c_r-__READ__0000000001",
            "_c_m-lock-0000000003",
            "_c_s-__SEAT__0000000002",
            "_c_n-lock-0000000004",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            curator_mutex_first(&names).map(String::as_str),
            Some("_c_m-lock-0000000003")
        );
        let kept = [names.clone(), vec!["_k_k-lock-0000000000".into()]].concat();
        assert_eq!(
            curator_mutex_first(&kept).map(String::as_str),
            Some("_k_k-lock-0000000000")
        );
        assert_eq!(curator_mutex_first(&names[..1]), None);
    }

    #[test]
    fn an_exclusive_pair_is_one_place_in_line_and_a_lone_companion_still_excludes() {
        let names = [
            "_c_p-lock-0000000001",
            "_c_p-__WRIT__0000000002",
            "_c_r-__READ__0000000003",
        ];
        let children = q(&names);
        let got: Vec<&str> = children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(got, ["_c_p-lock-0000000001", "_c_r-__READ__0000000003"]);
        assert_eq!(owners(&children, |_| 1), [0]);
        let listing: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            companion_in(&listing, "_c_p-lock-0000000001").as_deref(),
            Some("_c_p-__WRIT__0000000002")
        );
        assert_eq!(companion_in(&listing, "_c_r-__READ__0000000003"), None);
        assert_eq!(
            companion_name("_c_p-lock-0000000009", "lock-", "__WRIT__").as_deref(),
            Some("_c_p-__WRIT__0000000010")
        );
        // A seat's `__READ__` goes with it the same way.
        let seat = q(&["_c_s-__SEAT__0000000004", "_c_s-__READ__0000000005"]);
        assert_eq!(seat.len(), 1);
        assert_eq!(seat[0].kind, Kind::Seat);
        // Without its `lock-` node, or not made with it, a `__WRIT__` node is a writer of its own.
        for names in [
            &["_c_p-__WRIT__0000000002", "_c_r-__READ__0000000003"][..],
            &["_c_p-lock-0000000001", "_c_p-__WRIT__0000000003"],
            &["_c_p-lock-0000000001", "_c_q-__WRIT__0000000002"],
            &["p-lock-0000000001", "p-__WRIT__0000000002"],
        ] {
            let writers = q(names)
                .iter()
                .filter(|c| c.name.contains(WRITE_KIND))
                .count();
            assert_eq!(writers, 1, "{names:?}");
        }
    }

    /// The clients in the model below: dlock's three kinds of holder (seats out of two), Curator's
    /// mutex and its read-write lock's two halves.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Who {
        DlockExclusive,
        DlockShared,
        DlockSeat,
        CuratorMutex,
        CuratorWriter,
        CuratorReader,
    }

    /// Curator's `StandardLockInternalsDriver.standardFixForSorting`: what follows the last
    /// `lock_name`, or the whole name without one.
    fn fix_for_sorting<'a>(name: &'a str, lock_name: &str) -> &'a str {
        match name.rfind(lock_name) {
            Some(i) => &name[i + lock_name.len()..],
            None => name,
        }
    }

    /// Curator's `LockInternals.getSortedChildren` with a recipe's sorter.
    fn curator_sorted<'a>(names: &[&'a str], fix: impl Fn(&'a str) -> &'a str) -> Vec<&'a str> {
        let mut sorted = names.to_vec();
        sorted.sort_by(|a, b| fix(a).cmp(fix(b)));
        sorted
    }

    /// Whether Curator lets `node` in, as the recipe `who` judges `names`.
    fn curator_owns(who: Who, names: &[&str], node: &str) -> bool {
        // InterProcessReadWriteLock's SortingLockInternalsDriver.
        let read_write = |n| fix_for_sorting(fix_for_sorting(n, "__READ__"), "__WRIT__");
        match who {
            Who::CuratorMutex => curator_sorted(names, |n| fix_for_sorting(n, "lock-"))[0] == node,
            Who::CuratorWriter => curator_sorted(names, read_write)[0] == node,
            Who::CuratorReader => {
                let sorted = curator_sorted(names, read_write);
                let me = sorted.iter().position(|n| *n == node).unwrap();
                !sorted[..me].iter().any(|n| n.contains("__WRIT__"))
            }
            _ => unreachable!("not Curator"),
        }
    }

    proptest::proptest! {
        /// Whatever the order of arrivals, and whoever has left since, no dlock holder ever holds
        /// beside a Curator mutex, writer or reader it conflicts with, by either side's judgement.
        #[test]
        fn dlock_and_curators_recipes_never_hold_together(
            arrivals in proptest::collection::vec((0..6u8, proptest::bool::ANY), 1..8)
        ) {
            let whos = [
                Who::DlockExclusive,
                Who::DlockShared,
                Who::DlockSeat,
                Who::CuratorMutex,
                Who::CuratorWriter,
                Who::CuratorReader,
            ];
            // Each client's nodes (its first one is whom the others see it by), if it stayed.
            let mut clients: Vec<(Who, Vec<String>)> = Vec::new();
            let mut next = 1;
            for (i, (kind, stays)) in arrivals.into_iter().enumerate() {
                let who = whos[kind as usize];
                let kinds: &[&str] = match who {
                    Who::DlockExclusive => &["lock-", "__WRIT__"],
                    Who::DlockShared | Who::CuratorReader => &["__READ__"],
                    Who::DlockSeat => &["__SEAT__", "__READ__"],
                    Who::CuratorMutex => &["lock-"],
                    Who::CuratorWriter => &["__WRIT__"],
                };
                let nodes: Vec<String> = kinds
                    .iter()
                    .map(|k| {
                        next += 1;
                        format!("_c_{i:08}-0000-4000-8000-000000000000-{k}{:010}", next - 1)
                    })
                    .collect();
                if stays {
                    clients.push((who, nodes));
                }
            }
            let names: Vec<String> = clients.iter().flat_map(|(_, n)| n.clone()).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let dlock_queue = queue(&names);
            let dlock_owners: Vec<&str> = owners(&dlock_queue, |_| 2)
                .into_iter()
                .map(|i| dlock_queue[i].name.as_str())
                .collect();
            let holding: Vec<Who> = clients
                .iter()
                .filter(|(who, nodes)| match who {
                    Who::DlockExclusive | Who::DlockShared | Who::DlockSeat => {
                        dlock_owners.contains(&nodes[0].as_str())
                    }
                    curator => curator_owns(*curator, &refs, &nodes[0]),
                })
                .map(|(who, _)| *who)
                .collect();
            let shared = |w: &Who| matches!(w, Who::DlockShared | Who::DlockSeat | Who::CuratorReader);
            for (i, a) in holding.iter().enumerate() {
                for b in &holding[i + 1..] {
                    let dlock = [a, b].iter().any(|w| {
                        matches!(w, Who::DlockExclusive | Who::DlockShared | Who::DlockSeat)
                    });
                    // Not yet: Curator's mutex never waits for a `__READ__` or `__SEAT__` node
                    // (DESIGN).
                    let known_gap = ([a, b].contains(&&Who::DlockShared)
                        || [a, b].contains(&&Who::DlockSeat))
                        && [a, b].contains(&&Who::CuratorMutex);
                    proptest::prop_assert!(
                        !dlock || known_gap || (shared(a) && shared(b)),
                        "{:?} and {:?} hold together: {:?}", a, b, names
                    );
                }
            }
            // And a client alone gets in: the pair never waits for itself.
            if clients.len() == 1 {
                proptest::prop_assert_eq!(holding.len(), 1);
            }
        }
    }

    #[test]
    fn an_exclusive_kept_node_and_its_companion_are_judged_once() {
        let names: Vec<String> = [
            "_k_a-lock-0000000000",
            "_k_a-__WRIT__0000000000",
            "_k_b-__WRIT__0000000000",
            "_k_c-__READ__0000000000",
            "_c_d-lock-0000000003",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            kept_companion("/x/dlock/n/_k_a-lock-0000000000").as_deref(),
            Some("/x/dlock/n/_k_a-__WRIT__0000000000")
        );
        assert_eq!(kept_companion("_k_c-__READ__0000000000"), None);
        assert_eq!(
            kept_companion("_k_e-__SEAT__0000000000").as_deref(),
            Some("_k_e-__READ__0000000000")
        );
        assert_eq!(kept_companion("_c_d-lock-0000000003"), None);
        // A lone companion keeps the lock by its own record.
        assert_eq!(
            kept_to_judge(&names),
            [
                "_k_a-lock-0000000000",
                "_k_b-__WRIT__0000000000",
                "_k_c-__READ__0000000000"
            ]
        );
        assert_eq!(
            kept_with_companion("/d", "_k_a-lock-0000000000", &names),
            ["/d/_k_a-lock-0000000000", "/d/_k_a-__WRIT__0000000000"]
        );
        assert_eq!(
            kept_with_companion("/d", "_k_c-__READ__0000000000", &names),
            ["/d/_k_c-__READ__0000000000"]
        );
    }
}

//! The queue recipe, as Apache Curator implements it, so that dlock and Curator clients exclude
//! each other: what kind of place a child node is, the order of the queue, and who owns the lock
//! (an exclusive node when first, a shared one behind no exclusive node, a seat behind no exclusive
//! node and fewer than N seats) or whom a waiter watches. Pure functions of a directory listing.

use super::kept::is_kept;
use crate::lock::Mode;

const EXCLUSIVE_KIND: &str = "lock-";
const SHARED_KIND: &str = "__READ__";
const SEAT_KIND: &str = "__SEAT__";
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
        if name.len() == 32 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
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

/// The lock's nodes in queue order.
pub(super) fn queue(names: &[String]) -> Vec<Child> {
    let mut children: Vec<Child> = names.iter().filter_map(|n| Child::parse(n)).collect();
    // Kept nodes (`--min-hold`, kept.rs) come before every queued node.
    children.sort_by(|a, b| {
        (!is_kept(&a.name), a.sequence, &a.name).cmp(&(!is_kept(&b.name), b.sequence, &b.name))
    });
    children
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
}

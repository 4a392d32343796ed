//! Who owns a lock, from its keys in create-revision order: etcd's mutex recipe (the key with the
//! lowest create revision owns; each waiter waits for the deletion of the last key created before
//! its own), extended to modes as the ZooKeeper backend extends Curator's: a shared key owns when no
//! exclusive key precedes it, a seat when no exclusive key and fewer than N seats precede it.
//! etcd's own mutex counts every earlier key, so to `etcdctl lock` dlock's shared holders and seats
//! are holders it waits for. Pure functions of a listing.

use dlock_core::lock::Mode;

/// What a key asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Exclusive,
    Shared,
    Seat,
}

/// Whether the key at `me` owns the lock, and if not, what it waits for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Owns,
    /// Wait for the key at this index to be deleted.
    Watch(usize),
    /// Wait for any earlier key to go (a seat waits for any of the N holders).
    WatchAll,
}

/// `kinds`: the lock's keys in create-revision order, `me` among them.
pub(super) fn verdict(kinds: &[Kind], me: usize, limit: u32) -> Verdict {
    let before = &kinds[..me];
    match kinds[me] {
        Kind::Exclusive => match before.len() {
            0 => Verdict::Owns,
            n => Verdict::Watch(n - 1),
        },
        kind => {
            if let Some(writer) = before.iter().rposition(|&k| k == Kind::Exclusive) {
                return Verdict::Watch(writer);
            }
            let seats = before.iter().filter(|&&k| k == Kind::Seat).count();
            if kind == Kind::Seat && seats >= limit as usize {
                return Verdict::WatchAll;
            }
            Verdict::Owns
        }
    }
}

/// Indexes of the keys that own the lock; each seat judged by its own limit.
pub(super) fn owners(kinds: &[Kind], limit_of: impl Fn(usize) -> u32) -> Vec<usize> {
    (0..kinds.len())
        .filter(|&i| verdict(kinds, i, limit_of(i)) == Verdict::Owns)
        .collect()
}

/// The kind a request's key is, and the limit its turn is judged by.
pub(super) fn kind_of(mode: Mode) -> (Kind, u32) {
    match mode {
        Mode::Exclusive => (Kind::Exclusive, 1),
        Mode::Shared => (Kind::Shared, 0),
        Mode::Limit(n) => (Kind::Seat, n),
    }
}

#[cfg(test)]
mod tests {
    use super::Kind::*;
    use super::*;

    #[test]
    fn exclusive_waiters_watch_only_the_key_just_ahead() {
        let q = [Exclusive, Exclusive, Exclusive];
        assert_eq!(verdict(&q, 0, 1), Verdict::Owns);
        assert_eq!(verdict(&q, 1, 1), Verdict::Watch(0));
        assert_eq!(verdict(&q, 2, 1), Verdict::Watch(1));
    }

    #[test]
    fn shared_holders_run_together_until_an_exclusive_key_queues() {
        let q = [Shared, Shared, Exclusive, Shared];
        assert_eq!(owners(&q, |_| 1), [0, 1]);
        assert_eq!(verdict(&q, 2, 1), Verdict::Watch(1));
        assert_eq!(verdict(&q, 3, 0), Verdict::Watch(2));
    }

    #[test]
    fn seats_admit_the_first_n_alongside_shared_holders() {
        let q = [Seat, Shared, Seat, Seat];
        assert_eq!(owners(&q, |_| 2), [0, 1, 2]);
        assert_eq!(verdict(&q, 3, 2), Verdict::WatchAll);
        assert_eq!(verdict(&[Exclusive, Seat], 1, 5), Verdict::Watch(0));
    }
}

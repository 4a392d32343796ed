//! Where a lock lives in etcd's key space: every lock NAME is the prefix `/dlock/NAME/` (NAME
//! percent-escaped, so that no name's prefix contains another's), and each holder or waiter is one
//! key under it named by its lease in hex, as etcd's own mutex (and so `etcdctl lock /dlock/NAME`)
//! names its keys. Keys are the first thing another client can forge, so the mapping is reversible
//! and checked.

use dlock_core::lock::LockName;
use dlock_core::text::{percent_decode, percent_encode};

/// Every lock's prefix starts with this.
pub(super) const ROOT: &str = "/dlock/";

/// The escaped form of a name: `%`, `/` and every character that is not printable (which a shell
/// user could not type after `etcdctl lock /dlock/`) become `%XX` per UTF-8 byte. Escaping `/`
/// keeps one lock's prefix from covering another's keys (`/dlock/a/` would otherwise cover the keys
/// of lock `a/b`), as etcd's recipe ranges over everything under the prefix.
pub(super) fn escaped_name(name: &LockName) -> String {
    percent_encode(name.as_str(), |_, c| {
        c == '/' || c == '%' || c.is_whitespace() || c.is_control()
    })
}

/// `/dlock/NAME/`: the prefix every key of the lock NAME starts with.
pub(super) fn prefix(name: &LockName) -> String {
    format!("{ROOT}{}/", escaped_name(name))
}

/// The key of the holder or waiter with this lease, as etcd's mutex writes it.
pub(super) fn key(prefix: &str, lease: i64) -> String {
    format!("{prefix}{lease:x}")
}

/// The lock a key under `ROOT` belongs to: `(name, rest)` where `rest` follows `/dlock/NAME/`;
/// `None` for a key that is no lock's (no `/` after the name, or a name that does not map back).
pub(super) fn lock_of(key: &[u8]) -> Option<(LockName, &[u8])> {
    let rest = key.strip_prefix(ROOT.as_bytes())?;
    let slash = rest.iter().position(|&b| b == b'/')?;
    let escaped = std::str::from_utf8(&rest[..slash]).ok()?;
    let name = LockName::new(&percent_decode(escaped)?).ok()?;
    (escaped_name(&name) == escaped).then_some((name, &rest[slash + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    #[test]
    fn names_map_to_one_prefix_that_covers_no_other_name() {
        assert_eq!(prefix(&name("deploy")), "/dlock/deploy/");
        assert_eq!(prefix(&name("a/b")), "/dlock/a%2Fb/");
        assert_eq!(
            prefix(&name("/projects/x y")),
            "/dlock/%2Fprojects%2Fx%20y/"
        );
        assert_eq!(prefix(&name("100%")), "/dlock/100%25/");
        assert_eq!(prefix(&name("über")), "/dlock/über/");
        assert!(!prefix(&name("a/b")).starts_with(&prefix(&name("a"))));
        assert_eq!(
            key("/dlock/x/", 0x694d9b4b3a7e1a04),
            "/dlock/x/694d9b4b3a7e1a04"
        );
    }

    #[test]
    fn keys_map_back_to_their_lock_or_to_none() {
        let (n, rest) = lock_of(b"/dlock/a%2Fb/694d").unwrap();
        assert_eq!((n.as_str(), rest), ("a/b", &b"694d"[..]));
        assert!(lock_of(b"/dlock/plain").is_none());
        assert!(
            lock_of(b"/dlock/a%2fb/1").is_none(),
            "not the spelling dlock writes"
        );
        assert!(lock_of(b"/dlock/%zz/1").is_none());
        assert!(lock_of(b"/dlock//1").is_none());
        assert!(lock_of(b"/other/x/1").is_none());
        assert!(lock_of(b"/dlock/\xff/1").is_none());
    }

    proptest::proptest! {
        #[test]
        fn every_name_round_trips(raw in "\\PC{1,40}") {
            if let Ok(n) = LockName::new(&raw) {
                let k = key(&prefix(&n), 7);
                let (back, rest) = lock_of(k.as_bytes()).expect("maps back");
                proptest::prop_assert_eq!(back, n);
                proptest::prop_assert_eq!(rest, b"7");
            }
        }
    }
}

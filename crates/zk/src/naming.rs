//! Where things live on the ensemble: the one znode a lock name maps to (percent-escaped, so any
//! valid name is exactly one node and maps back), and the protected prefix of a holder's node.
//! Paths are the first thing another client can forge, so every mapping here is reversible and
//! checked against what ZooKeeper accepts.

use dlock_core::error;

use dlock_core::lock::LockName;
use dlock_core::text::{hex, percent_decode, percent_encode};

/// The directory every lock lives in, under the chroot.
pub(super) const ROOT: &str = "dlock";

/// Characters ZooKeeper accepts in a path (see its PathUtils.validatePath). It checks UTF-16 code
/// units, so it refuses every character outside the Basic Multilingual Plane too (a surrogate pair
/// in Java); surrogates themselves cannot occur in a str.
pub(super) fn allowed(c: char) -> bool {
    !(c <= '\u{1f}'
        || ('\u{7f}'..='\u{9f}').contains(&c)
        || ('\u{e000}'..='\u{f8ff}').contains(&c)
        || c >= '\u{fff0}')
}

/// The one znode name for a lock name. `%` itself is escaped, so the mapping is reversible and two
/// names never share a node. `zookeeper` needs no escape: it is reserved only at the root.
pub(super) fn node_name(name: &LockName) -> String {
    percent_encode(name.as_str(), |i, c| {
        c == '/' || c == '%' || (i == 0 && c == '.') || !allowed(c)
    })
}

/// The lock name a directory stands for, if it is one of ours.
pub(super) fn lock_name_of(node: &str) -> Option<LockName> {
    let name = LockName::new(&percent_decode(node)?).ok()?;
    (node_name(&name) == node).then_some(name)
}

/// A random UUID (version 4), as Curator puts in protected node names.
pub(super) fn uuid() -> error::Result<String> {
    let mut b = [0u8; 16];
    dlock_core::lock::random_bytes(&mut b).map_err(|e| error!("cannot get random bytes: {e}"))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex = hex(&b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    #[test]
    fn every_name_is_one_znode_and_names_round_trip() {
        assert_eq!(node_name(&name("nightly-backup")), "nightly-backup");
        assert_eq!(node_name(&name("a/b")), "a%2Fb");
        assert_eq!(node_name(&name("..")), "%2E.");
        assert_eq!(node_name(&name(".")), "%2E");
        assert_eq!(node_name(&name("100%")), "100%25");
        assert_eq!(node_name(&name("zookeeper")), "zookeeper");
        assert_eq!(node_name(&name("\u{e000}x")), "%EE%80%80x");
        assert_eq!(node_name(&name("😀")), "%F0%9F%98%80");
        for n in [
            "a/b/../c",
            "../x",
            "über ✓",
            "%2F",
            ".hidden",
            "x\u{fff5}",
            "a😀\u{10ffff}",
        ] {
            let node = node_name(&name(n));
            assert!(!node.contains('/') && node != "." && node != "..", "{node}");
            assert_eq!(lock_name_of(&node), Some(name(n)));
        }
        assert_eq!(lock_name_of("a/b"), None);
        assert_eq!(lock_name_of("%2f"), None, "not the canonical spelling");
    }

    proptest::proptest! {
        /// Hostile names: any name is exactly one child of /dlock (no `/`, never `.` or `..`),
        /// and maps back to itself, so it can neither climb out of the subtree nor share a node.
        #[test]
        fn any_name_is_one_node_inside_the_dlock_subtree(
            raw in "\\PC{1,120}|[\\u{10000}-\\u{10ffff}a-z/.%\\u{e000}\\u{fff0}-\\u{ffff}]{1,60}"
        ) {
            let Ok(lock) = LockName::new(&raw) else { return Ok(()) };
            let node = node_name(&lock);
            proptest::prop_assert!(!node.is_empty() && !node.contains('/'));
            proptest::prop_assert!(node.chars().all(allowed), "ZooKeeper refuses {:?}", node);
            proptest::prop_assert!(node != "." && node != "..");
            proptest::prop_assert_eq!(lock_name_of(&node), Some(lock));
        }
    }
}

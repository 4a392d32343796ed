//! How a lock's name becomes its Redis keys, `dlock:{NAME}:...`, and back (for `list`): NAME is
//! percent-encoded where it could end the hash tag early, reach outside `dlock:` or act as a glob.

use dlock_core::lock::LockName;
use dlock_core::text::{percent_decode, percent_encode};

/// The keys of one lock.
#[derive(Clone)]
pub(super) struct Keys {
    /// `dlock:{NAME}` with NAME encoded.
    pub(super) base: String,
    /// On Redis Cluster: grants go by sharded pub/sub, on a channel in the lock's own slot.
    pub(super) sharded: bool,
}

impl Keys {
    pub(super) fn of(name: &LockName) -> Keys {
        Keys {
            base: format!("dlock:{{{}}}", encode_name(name.as_str())),
            sharded: false,
        }
    }

    /// The keys of `name` where grants go by sharded pub/sub (Redis Cluster) if `sharded`.
    pub(super) fn on(name: &LockName, sharded: bool) -> Keys {
        Keys {
            sharded,
            ..Keys::of(name)
        }
    }

    /// In the order the scripts expect (see lib.lua); on Redis Cluster a ninth, the prefix of
    /// the lock's grant channels (never a key that exists: it tells the scripts to use SPUBLISH).
    pub(super) fn all(&self) -> Vec<String> {
        let mut keys: Vec<String> = [
            "holders",
            "owners",
            "token",
            "queue",
            "alive",
            "kept",
            "last-run",
            "last-success",
        ]
        .iter()
        .map(|k| format!("{}:{k}", self.base))
        .collect();
        if self.sharded {
            keys.push(format!("{}:wake", self.base));
        }
        keys
    }
}

/// The SCAN pattern of the holders keys of the names that start with `prefix`:
/// `dlock:{ENCODED_PREFIX*}:holders`. Encoding is byte by byte, so the encoded prefix is a prefix
/// of every matching encoded name, and it has no glob characters.
pub(super) fn holders_pattern(prefix: &str) -> String {
    format!("dlock:{{{}*}}:holders", encode_name(prefix))
}

/// The lock whose holders key `key` is, if dlock would name a lock starting with `prefix` so.
pub(super) fn name_of_holders_key(key: &str, prefix: &str) -> Option<LockName> {
    let encoded = key.strip_prefix("dlock:{")?.strip_suffix("}:holders")?;
    let name = LockName::new(&percent_decode(encoded)?).ok()?;
    (name.as_str().starts_with(prefix) && Keys::of(&name).base == format!("dlock:{{{encoded}}}"))
        .then_some(name)
}

/// The SCAN pattern of the last-run and last-success keys of the names that start with `prefix`
/// (see `holders_pattern`).
pub(super) fn runs_pattern(prefix: &str) -> String {
    format!("dlock:{{{}*}}:last-*", encode_name(prefix))
}

/// The lock whose last-run or last-success key `key` is, if dlock would name a lock starting with
/// `prefix` so.
pub(super) fn name_of_runs_key(key: &str, prefix: &str) -> Option<LockName> {
    let key = key
        .strip_suffix(":last-run")
        .or_else(|| key.strip_suffix(":last-success"))?;
    name_of_holders_key(&format!("{key}:holders"), prefix)
}

/// Bytes that must not appear raw inside the hash tag: `%` (the escape itself), `{` and `}` (they
/// would end the tag early and change the slot), glob characters (so `list` can SCAN by prefix),
/// and the space and control characters (keys stay copy-pasteable in redis-cli).
fn must_encode(b: u8) -> bool {
    matches!(
        b,
        b'%' | b'{' | b'}' | b'*' | b'?' | b'[' | b']' | b'\\' | b' '
    ) || b < 0x20
        || b == 0x7f
}

/// A lock name as it appears inside `dlock:{...}`: readable, `%XX` for the bytes above.
fn encode_name(name: &str) -> String {
    percent_encode(name, |_, c| c.is_ascii() && must_encode(c as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside_their_hash_tag_and_round_trip() {
        for name in [
            "jobs/a",
            "a}b{c",
            "x}:holders",
            "50% off",
            "glob*?[x]\\",
            "ünï ✓",
            "{}",
        ] {
            let encoded = encode_name(name);
            assert!(
                !encoded.contains('{') && !encoded.contains('}'),
                "{encoded}"
            );
            assert!(
                !encoded.contains(['*', '?', '[', ']', '\\', ' ']),
                "{encoded}"
            );
            assert_eq!(percent_decode(&encoded).as_deref(), Some(name));
        }
        assert_eq!(encode_name("jobs/nightly-backup"), "jobs/nightly-backup");
        let keys = Keys::of(&LockName::new("a}b").unwrap());
        assert_eq!(keys.all()[0], "dlock:{a%7Db}:holders");
    }

    #[test]
    fn runs_keys_name_their_lock_and_nothing_else() {
        let name = |key: &str, prefix: &str| name_of_runs_key(key, prefix).map(|n| n.to_string());
        assert_eq!(runs_pattern("jobs/"), "dlock:{jobs/*}:last-*");
        assert_eq!(name("dlock:{a%7Db}:last-run", "").as_deref(), Some("a}b"));
        assert_eq!(
            name("dlock:{jobs/x}:last-success", "jobs/").as_deref(),
            Some("jobs/x")
        );
        for (key, prefix) in [
            ("dlock:{jobs/x}:last-success", "other"),
            ("dlock:{a}b}:last-run", ""),
            ("dlock:{%61}:last-run", ""),
            ("dlock:{a}:last-runs", ""),
            ("dlock:{a}:holders", ""),
        ] {
            assert_eq!(name(key, prefix), None, "{key}");
        }
    }

    proptest::proptest! {
        /// Hostile names: every key of any name stays inside `dlock:{...}` with the whole encoded
        /// name as its hash tag, and the encoding round-trips (so two names never share keys).
        #[test]
        fn any_name_keeps_its_keys_in_its_own_hash_tag(raw in "\\PC{1,120}") {
            let Ok(name) = LockName::new(&raw) else { return Ok(()) };
            let keys = Keys::of(&name);
            let tag_start = keys.base.find('{').map(|i| i + 1);
            let tag_end = keys.base.find('}');
            let in_namespace = keys.base.starts_with("dlock:\u{7b}");
            proptest::prop_assert!(in_namespace, "{} is outside dlock:{{...}}", keys.base);
            proptest::prop_assert_eq!(tag_end, Some(keys.base.len() - 1));
            let tag = &keys.base[tag_start.unwrap_or(0)..tag_end.unwrap_or(0)];
            let decoded = percent_decode(tag);
            proptest::prop_assert_eq!(decoded.as_deref(), Some(name.as_str()));
        }
    }
}

//! A lock's name as a file name in the lock directory, and back: plain names keep their spelling,
//! others are percent-encoded (so `/` and `..` never reach the file system), and names too long
//! for that are hashed.

use sha2::{Digest, Sha256};

use dlock_core::lock::LockName;
use dlock_core::text::{hex, percent_decode, percent_encode};

/// Longest file stem kept readable before falling back to a hash of the name.
const MAX_READABLE_STEM: usize = 200;

fn is_plain_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// See `FileBackend::path_of`. Percent-encoded stems always contain `%XX`, hashed ones start with
/// `%%`, and plain ones contain no `%`, so two names never share a stem short of a hash collision.
pub(super) fn file_stem(name: &LockName) -> String {
    let bytes = name.as_str().as_bytes();
    let plain = bytes.iter().all(|&b| is_plain_byte(b)) && bytes[0] != b'.';
    if plain && bytes.len() <= MAX_READABLE_STEM {
        return name.as_str().to_owned();
    }
    let encoded = percent_encode(name.as_str(), |i, c| {
        !(c.is_ascii() && is_plain_byte(c as u8)) || (i == 0 && c == '.')
    });
    if encoded.len() <= MAX_READABLE_STEM {
        return encoded;
    }
    let digest = Sha256::digest(bytes);
    format!("%%{}", hex(&digest))
}

/// The lock name a file stem spells (the inverse of `file_stem`), or `None` for a hashed stem or
/// one `file_stem` never makes.
pub(super) fn name_of_stem(stem: &str) -> Option<String> {
    if stem.starts_with("%%") {
        return None;
    }
    percent_decode(stem)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn stem(s: &str) -> String {
        file_stem(&LockName::new(s).unwrap())
    }

    #[test]
    fn plain_names_keep_their_spelling() {
        assert_eq!(stem("nightly-backup"), "nightly-backup");
        assert_eq!(stem("a.b_c"), "a.b_c");
    }

    #[test]
    fn names_that_could_escape_the_directory_are_encoded() {
        assert_eq!(stem("../etc/passwd"), "%2E.%2Fetc%2Fpasswd");
        assert_eq!(stem(".."), "%2E.");
        assert_eq!(stem("a/b"), "a%2Fb");
        assert!(!stem("x/../../y").contains('/'));
    }

    #[test]
    fn long_names_are_hashed_and_distinct() {
        let a = stem(&"é".repeat(200));
        let b = stem(&format!("{}x", "é".repeat(199)));
        assert!(a.starts_with("%%") && a.len() == 66);
        assert_ne!(a, b);
    }

    proptest::proptest! {
        /// Hostile names: whatever the name, its lock file is one plain entry of the lock
        /// directory (no `/`, not `.` or `..`, short enough for any file system), and distinct names
        /// get distinct files.
        #[test]
        fn any_name_maps_to_one_safe_file_name(a in "\\PC{1,200}", b in "\\PC{1,200}") {
            for raw in [&a, &b] {
                let Ok(name) = LockName::new(raw) else { continue };
                let stem = file_stem(&name);
                proptest::prop_assert!(!stem.contains('/') && !stem.contains('\0'));
                proptest::prop_assert!(!stem.starts_with('.'));
                proptest::prop_assert!(stem.len() <= 200 && !stem.is_empty());
                let path = Path::new("/locks").join(format!("{stem}.lock"));
                proptest::prop_assert_eq!(path.parent(), Some(Path::new("/locks")));
            }
            if let (Ok(na), Ok(nb)) = (LockName::new(&a), LockName::new(&b)) {
                proptest::prop_assert_eq!(na == nb, file_stem(&na) == file_stem(&nb));
            }
        }
    }
}

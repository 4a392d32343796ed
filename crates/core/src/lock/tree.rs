//! Tree locks (`--tree`): the locks a path in a hierarchy takes.

use std::fmt;

use super::{LockName, Mode, NameError};

/// The locks a tree lock on `path` takes, in the tree-locking scheme of document stores: every
/// ancestor shared, the path itself in `leaf` mode. `/projects/site/README.txt` gives `/projects`
/// and `/projects/site` shared and `/projects/site/README.txt` as asked. So siblings run together,
/// while a holder of `/projects/site` excludes (and waits for) all work below it.
///
/// The path is normalised (repeated and trailing `/`, `.` removed; a leading `/` added) and `..`
/// is refused, since it would let two spellings of one path take different locks.
pub fn tree_locks(path: &str, leaf: Mode) -> Result<Vec<(LockName, Mode)>, TreeError> {
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(TreeError::ParentComponent(path.to_owned())),
            _ => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Ok(vec![(LockName::new("/").map_err(TreeError::Name)?, leaf)]);
    }
    let mut locks = Vec::with_capacity(parts.len());
    let mut prefix = String::new();
    for (i, part) in parts.iter().enumerate() {
        prefix.push('/');
        prefix.push_str(part);
        let mode = if i + 1 == parts.len() {
            leaf
        } else {
            Mode::Shared
        };
        locks.push((LockName::new(&prefix).map_err(TreeError::Name)?, mode));
    }
    Ok(locks)
}

#[derive(Debug, PartialEq, Eq)]
pub enum TreeError {
    ParentComponent(String),
    Name(NameError),
}

impl fmt::Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::ParentComponent(p) => {
                write!(f, "tree path {p:?} contains `..`; give it without")
            }
            TreeError::Name(e) => write!(f, "tree path: {e}"),
        }
    }
}

impl std::error::Error for TreeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_locks_take_ancestors_shared_and_the_leaf_as_asked() {
        let names = |p: &str, m| {
            tree_locks(p, m)
                .unwrap()
                .into_iter()
                .map(|(n, m)| format!("{n} {m}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names("/projects/site/README.txt", Mode::Exclusive),
            [
                "/projects shared",
                "/projects/site shared",
                "/projects/site/README.txt exclusive"
            ]
        );
        assert_eq!(
            names("projects//./site/", Mode::Shared),
            ["/projects shared", "/projects/site shared"]
        );
        assert_eq!(names("/", Mode::Exclusive), ["/ exclusive"]);
        assert!(matches!(
            tree_locks("/a/../b", Mode::Exclusive),
            Err(TreeError::ParentComponent(_))
        ));
    }

    proptest::proptest! {
        /// Tree paths never yield a `..` component, and every lock is an ancestor of the last.
        #[test]
        fn tree_locks_are_nested_and_never_climb(path in "[a-z./]{0,40}") {
            if let Ok(locks) = tree_locks(&path, Mode::Exclusive) {
                let last = locks.last().map(|(n, _)| n.as_str().to_owned()).unwrap_or_default();
                for (name, _) in &locks {
                    proptest::prop_assert!(!name.as_str().split('/').any(|c| c == ".." || c == "."));
                    proptest::prop_assert!(last.starts_with(name.as_str()));
                }
            } else {
                proptest::prop_assert!(path.split('/').any(|c| c == ".."));
            }
        }
    }
}

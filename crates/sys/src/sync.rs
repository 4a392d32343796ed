//! State shared between dlock's threads.

use std::sync::{Mutex, MutexGuard};

/// A mutex's data, also after a panic elsewhere while it was held: what dlock keeps behind a mutex
/// is plain values, each replaced in one assignment, so a panic cannot leave them half-changed.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

//! The part of the store contract for concurrency groups (`run --supersede` and
//! `--cancel-in-progress`): a store keeps each lock's group record; supervise/group.rs decides
//! everything from it. A store that can tell a holder of a change to its records itself (pub/sub, a
//! watch, LISTEN, inotify) says so with `GroupRecords::hear_changes`; the holder still reads them
//! now and then, in case a word is lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error;
use crate::error::FailAs;

use crate::lock::LockName;

/// Most tries of a compare-and-set change that others' changes keep beating: each lost try means
/// another run made progress, so this is never reached in practice.
const MAX_SWAPS: usize = 100;

/// A store's side of the concurrency groups: one record per lock name, kept beside the lock as
/// plain text the store never interprets (supervise/group.rs reads and writes it).
pub trait GroupRecords {
    /// The record of `name` as stored; `None` when there is none (an empty one is none too).
    fn read(&self, name: &LockName) -> error::Result<Option<String>>;

    /// Replaces the record of `name` with what `change` makes of the one stored (`None`: there
    /// is none, or remove it), with no other update of it in between: under a lock, or as a
    /// compare-and-set the store repeats (so `change` may be called more than once).
    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> error::Result<()>;

    /// How often a holder reads its records to hear of a request to cancel it, which bounds how
    /// soon it hears when the store tells it nothing.
    fn poll_every(&self) -> Duration;

    /// Starts hearing the store tell of changes to the records of `names`: `changed` is called
    /// (from a thread of the store's) each time one may have changed, and the holder then reads
    /// them. `None` where the store tells nothing, or cannot now: the holder reads every
    /// `poll_every`. Returns at once: a listener that must connect does so on its own thread. A
    /// word heard is only a cue to read: it is never trusted for what it says.
    fn hear_changes(&self, _names: &[LockName], _changed: OnChange) -> Option<Hearing> {
        None
    }
}

/// What a store calls when a record may have changed (see `GroupRecords::hear_changes`).
pub type OnChange = Box<dyn Fn() + Send + 'static>;

/// A store's hearing of changes, until dropped. Dropping it never waits on the store: whatever
/// listens (a thread on a connection of its own) sees `Wanted::still` turn false and ends soon
/// after.
pub struct Hearing {
    _wanted: Arc<()>,
    /// Set by the listener once it hears (`Wanted::listening`), cleared when it ends.
    listening: Arc<AtomicBool>,
    /// How often the holder still reads its records while the listener hears, in case a word
    /// is lost (a pub/sub message is sent at most once, a pooler eats a notification).
    while_listening: Duration,
}

/// A listener's side of a `Hearing`: whether it is still wanted (checked at least once a
/// second), and its word that it now hears.
#[derive(Clone)]
pub struct Wanted {
    wanted: Weak<()>,
    listening: Arc<AtomicBool>,
}

impl Wanted {
    pub fn still(&self) -> bool {
        self.wanted.strong_count() > 0
    }

    /// The listener hears from now on (subscribed, its watches set): the holder reads less
    /// often, until the listener ends. It calls `changed` too, for what came before.
    pub fn listening(&self) {
        self.listening.store(true, Ordering::Relaxed);
    }
}

impl Hearing {
    /// Hearing while `listen` runs on a thread of its own (named `name`), given whether it is
    /// still wanted; `None` when no thread can be started. The thread inherits the caller's
    /// signal mask (the holder's record thread has every signal blocked, as the main thread
    /// keeps them outside its waits).
    pub fn on_thread(
        name: &str,
        while_listening: Duration,
        listen: impl FnOnce(&Wanted) + Send + 'static,
    ) -> Option<Hearing> {
        let alive = Arc::new(());
        let listening = Arc::new(AtomicBool::new(false));
        let wanted = Wanted {
            wanted: Arc::downgrade(&alive),
            listening: listening.clone(),
        };
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                listen(&wanted);
                wanted.listening.store(false, Ordering::Relaxed);
            })
            .ok()?;
        Some(Hearing {
            _wanted: alive,
            listening,
            while_listening,
        })
    }

    /// How often the holder reads its records: less often while the listener hears, `deaf`
    /// (the store's `poll_every`) before it does and once it has ended.
    pub fn poll_every(&self, deaf: Duration) -> Duration {
        if self.listening.load(Ordering::Relaxed) {
            self.while_listening
        } else {
            deaf
        }
    }
}

/// How often a holder whose store tells it of changes still reads its records.
pub const POLL_WHILE_HEARING: Duration = Duration::from_secs(1);

/// `GroupRecords::update` on a store that changes a record by compare-and-set: `read` gives the
/// record and whatever version `swap` compares (its text alone, where the text is the version);
/// `swap(version, old, new)` writes `new` (`None`: removes it) only if the record is still at
/// `version`, and says whether it did. Tried again while others' changes come in between; nothing
/// is written when `change` changes nothing. `record` names the record in the error.
pub fn update_by_swaps<V>(
    record: &str,
    change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    mut read: impl FnMut() -> error::Result<(Option<String>, V)>,
    mut swap: impl FnMut(V, Option<&str>, Option<&str>) -> error::Result<bool>,
) -> error::Result<()> {
    for _ in 0..MAX_SWAPS {
        let (old, version) = read()?;
        let new = change(old.as_deref());
        if new == old || swap(version, old.as_deref(), new.as_deref())? {
            return Ok(());
        }
    }
    Err(error!("{record} kept changing under this dlock")).unavailable()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn a_hearing_is_wanted_until_dropped() {
        let (said, heard) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let deaf = Duration::from_millis(100);
        let hearing = Hearing::on_thread("test", POLL_WHILE_HEARING, move |wanted| {
            said.send(wanted.still()).unwrap();
            stopped.recv().unwrap();
            wanted.listening();
            said.send(wanted.still()).unwrap();
            stopped.recv().unwrap();
            said.send(wanted.still()).unwrap();
        })
        .unwrap();
        assert!(heard.recv().unwrap());
        assert_eq!(hearing.poll_every(deaf), deaf, "not listening yet");
        stop.send(()).unwrap();
        assert!(heard.recv().unwrap());
        assert_eq!(hearing.poll_every(deaf), POLL_WHILE_HEARING);
        let listening = hearing.listening.clone();
        drop(hearing);
        stop.send(()).unwrap();
        assert!(!heard.recv().unwrap());
        // The listener has ended (its thread set this after `listen` returned).
        for _ in 0..1000 {
            if !listening.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("still listening after its listener ended");
    }

    #[test]
    fn a_swap_beaten_by_another_change_is_made_again_on_the_new_record() {
        let stored = RefCell::new(Some("a".to_owned()));
        let beaten = RefCell::new(1);
        let mut append = |old: Option<&str>| Some(format!("{}+", old.unwrap_or("")));
        update_by_swaps(
            "the record",
            &mut append,
            || Ok((stored.borrow().clone(), ())),
            |(), old, new| {
                if *beaten.borrow() > 0 {
                    *beaten.borrow_mut() -= 1;
                    *stored.borrow_mut() = Some("b".into());
                    return Ok(false);
                }
                assert_eq!(old, stored.borrow().as_deref());
                *stored.borrow_mut() = new.map(str::to_owned);
                Ok(true)
            },
        )
        .unwrap();
        assert_eq!(stored.borrow().as_deref(), Some("b+"));
    }

    #[test]
    fn no_change_writes_nothing_and_endless_beating_is_an_outage() {
        let mut same = |old: Option<&str>| old.map(str::to_owned);
        let never = |_: (), _: Option<&str>, _: Option<&str>| -> error::Result<bool> {
            panic!("nothing to write")
        };
        update_by_swaps("r", &mut same, || Ok((Some("x".into()), ())), never).unwrap();
        let mut other = |_: Option<&str>| Some("y".to_owned());
        let err = update_by_swaps(
            "the record of x",
            &mut other,
            || Ok((Some("x".into()), ())),
            |_, _, _| Ok(false),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("the record of x kept changing"),
            "{err}"
        );
    }
}

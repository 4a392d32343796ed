//! What a backend's blocking calls and its own threads need of the process's signals, without a
//! backend touching one: a deadline that interrupts this thread's blocking system call (`Alarm`),
//! the supervisor's wake-ups kept off this thread while a wait cleans up (`WakeBlocked`), and
//! threads and tokio runtimes that never take a signal (`thread`, `runtime`; a runtime also never
//! holds dlock's exit up waiting for its threads, `Runtime`). Signals are the
//! supervisor's (src/signal/): it has the mechanisms, and main.rs hands them over, once, before
//! anything else (`provide`), so no file under src/backend/ imports signal/ (tests/seams.rs checks
//! that). Cancellation itself reaches a backend only through `Waiting` and `BackendConfig::stop`.
//!
//! Until they are provided (the unit tests), an alarm is never armed (the socket timeouts still
//! bound each call), nothing is blocked, and threads keep the mask they are started with.

use std::any::Any;
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::Instant;

/// The mechanisms, as signal/ has them.
#[derive(Clone, Copy)]
pub struct Provided {
    /// `signal::interrupt::Alarm::at`: interrupts this thread's blocking system call once, at the
    /// deadline, unless what it returns was dropped before; `None` when no timer can be made.
    pub alarm_at: fn(Instant) -> Option<Box<dyn Any>>,
    /// `signal::mask::WakeBlocked::on_this_thread`: the wake-up signal blocked on this thread
    /// until what it returns is dropped.
    pub wake_blocked: fn() -> Box<dyn Any>,
    /// `signal::mask::block_all_in_this_thread`: every signal blocked in this thread, for good.
    pub block_all: fn(),
    /// `signal::mask::Masked::blocking_all`: every signal blocked on this thread until what it
    /// returns is dropped (`None` when the mask cannot be changed).
    pub all_blocked: fn() -> Option<Box<dyn Any>>,
}

static PROVIDED: OnceLock<Provided> = OnceLock::new();

/// Hands the mechanisms over (main.rs, first thing; later calls change nothing).
pub fn provide(provided: Provided) {
    let _ = PROVIDED.set(provided);
}

/// Interrupts this thread's blocking system call at a deadline, once, while alive: a library
/// that retries its call after EINTR is then still bounded by its socket timeout (firing again and
/// again would restart that timeout every time).
pub struct Alarm {
    _armed: Box<dyn Any>,
}

impl Alarm {
    /// `None` when no timer can be made; the socket timeouts still bound each system call then.
    pub fn at(deadline: Instant) -> Option<Alarm> {
        let armed = (PROVIDED.get()?.alarm_at)(deadline)?;
        Some(Alarm { _armed: armed })
    }
}

/// While alive, the supervisor's wake-up signal is blocked on this thread, so that the last calls
/// of a wait being abandoned (removing its place in a queue) are not cut short.
pub struct WakeBlocked {
    _blocked: Option<Box<dyn Any>>,
}

impl WakeBlocked {
    pub fn on_this_thread() -> WakeBlocked {
        WakeBlocked {
            _blocked: PROVIDED.get().map(|p| (p.wake_blocked)()),
        }
    }
}

/// Blocks every signal in this thread, for good: for a tokio runtime's threads that it starts
/// later, from whichever thread needs one (a blocking thread that resolves a host name, started
/// inside `block_on` on dlock's main thread, whose stop signals are unblocked while it connects).
fn block_all_signals() {
    if let Some(provided) = PROVIDED.get() {
        (provided.block_all)();
    }
}

/// Runs `start` with every signal blocked on this thread, then puts the mask back: the threads it
/// starts (a library's, which dlock does not start itself) start with every signal blocked, and
/// never take one meant for the supervisor, not even before they could block it themselves.
pub fn with_all_signals_blocked<T>(start: impl FnOnce() -> T) -> T {
    let _blocked = PROVIDED.get().and_then(|p| (p.all_blocked)());
    start()
}

/// Starts a thread named `name` that runs `work` with every signal blocked (from its start: it
/// inherits the mask it is started with).
pub fn thread<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    with_all_signals_blocked(|| {
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(work)
    })
}

/// A tokio runtime none of whose threads ever takes a signal. With a `worker` name: one worker
/// thread of that name (and one blocking thread), for a client whose own task must run while
/// every dlock thread is blocked elsewhere; without: calls run on the calling thread, inside
/// `block_on` (its blocking threads, resolving a host name, still never take a signal).
#[cfg(feature = "tokio")]
pub fn runtime(worker: Option<&str>) -> std::io::Result<Runtime> {
    let mut builder = match worker {
        Some(name) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder
                .worker_threads(1)
                .max_blocking_threads(1)
                .thread_name(name);
            builder
        }
        None => tokio::runtime::Builder::new_current_thread(),
    };
    // The workers start blocked; threads started later block all at their start.
    builder.on_thread_start(block_all_signals).enable_all();
    with_all_signals_blocked(|| builder.build()).map(|built| Runtime(Some(built)))
}

/// A tokio runtime that, dropped, shuts down without waiting for its threads: a server gone
/// silent, or a task stuck in a call, must never hold dlock's exit up. Every call a backend makes
/// on it is bounded by the backend; what it still runs once dropped ends with the process.
#[cfg(feature = "tokio")]
pub struct Runtime(Option<tokio::runtime::Runtime>);

#[cfg(feature = "tokio")]
impl std::ops::Deref for Runtime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0
            .as_ref()
            .expect("the runtime goes only when it is dropped")
    }
}

#[cfg(feature = "tokio")]
impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(all(test, feature = "tokio"))]
mod tests {
    use super::runtime;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Dropping a runtime returns while a call it started is still stuck: neither a blocking
    /// call nor a task that never ends holds the caller (and so dlock's exit) up.
    #[test]
    fn a_dropped_runtime_does_not_wait_for_a_stuck_call() {
        for worker in [None, Some("dlock-test")] {
            let built = runtime(worker).expect("a runtime");
            let (release, stuck) = mpsc::channel::<()>();
            let (started, has_started) = mpsc::channel();
            built.spawn_blocking(move || {
                started.send(()).unwrap();
                let _ = stuck.recv();
            });
            built.spawn(std::future::pending::<()>());
            has_started
                .recv_timeout(Duration::from_secs(30))
                .expect("the blocking call started");
            let (dropped, was_dropped) = mpsc::channel();
            std::thread::spawn(move || {
                drop(built);
                dropped.send(()).unwrap();
            });
            let returned = was_dropped.recv_timeout(Duration::from_secs(30));
            release.send(()).unwrap();
            assert!(
                returned.is_ok(),
                "{worker:?}: the drop waited for the stuck call"
            );
        }
    }
}

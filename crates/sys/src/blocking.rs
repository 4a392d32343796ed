//! What a backend's blocking calls and its own threads need of the process's signals: a deadline
//! that interrupts this thread's blocking system call (`Alarm`), the supervisor's wake-ups kept off
//! this thread while a wait cleans up (`WakeBlocked`), and threads and tokio runtimes that never
//! take a signal (`thread`, `runtime`; a runtime also never holds dlock's exit up waiting for its
//! threads, `Runtime`). The mechanisms are signal/'s; a store calls these and nothing else of it.
//! Cancellation itself reaches a backend only through `Waiting` and `BackendConfig::stop` (core).

use std::thread::JoinHandle;

use crate::signal::mask::Masked;

/// Interrupts this thread's blocking system call at a deadline, once, while alive (`Alarm::at`;
/// `None` when no timer can be made, and the socket timeouts still bound each system call then).
pub use crate::signal::interrupt::Alarm;

/// While alive, the supervisor's wake-up signal is blocked on this thread, so that the last calls
/// of a wait being abandoned (removing its place in a queue) are not cut short.
pub use crate::signal::mask::WakeBlocked;

/// Runs `start` with every signal blocked on this thread, then puts the mask back: the threads it
/// starts (a library's, which dlock does not start itself) start with every signal blocked, and
/// never take one meant for the supervisor, not even before they could block it themselves.
pub fn with_all_signals_blocked<T>(start: impl FnOnce() -> T) -> T {
    let _blocked = Masked::blocking_all().ok();
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
    // A blocking thread that resolves a host name is started later, from whichever thread needs
    // one (inside `block_on` on dlock's main thread, whose stop signals are unblocked while it
    // connects): each blocks every signal at its start, for good.
    builder
        .on_thread_start(crate::signal::mask::block_all_in_this_thread)
        .enable_all();
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

//! Why a call to a SQL server failed, for PostgreSQL and MySQL alike: each backend names its own
//! error codes (`C`: PostgreSQL's SQLSTATE, MySQL's error number) and which of them mean what;
//! and a server whose connection slots are all taken, tried again within the connect budget.

use std::time::{Duration, Instant};

use dlock_core::error;
use dlock_core::error::FailAs;

use dlock_core::backend::stop::{Stop, STOPPED};

/// Why a call failed.
#[derive(Debug)]
pub enum Fault<C> {
    /// The server could not be reached or did not answer in time: worth trying again.
    Unreachable(String),
    /// The server answered that its connection slots are all taken, also after trying again for
    /// the connect budget: busy, not unreachable.
    Full(String),
    /// The server answered with an error (`code`: its own code for it).
    Refused { code: C, message: String },
    /// dlock's tables could not be created: the whole error, for the user.
    Setup(error::Error),
}

impl<C> Fault<C> {
    pub fn message(&self) -> String {
        match self {
            Fault::Unreachable(m) | Fault::Full(m) => m.clone(),
            Fault::Refused { message, .. } => message.clone(),
            Fault::Setup(e) => format!("{e:#}"),
        }
    }

    /// The error for the user, naming the server (`postgres at 10.0.0.5:5432: ...`, `cannot reach
    /// postgres at ...` as every backend says it), tagged backend-unavailable; a failed setup is
    /// its own error, which names the server already.
    pub fn into_error(self, backend: &str, shown: &str) -> error::Error {
        let message = match self {
            Fault::Setup(e) => return e,
            Fault::Unreachable(why) => format!("cannot reach {backend} at {shown}: {why}"),
            _ => format!("{backend} at {shown}: {}", self.message()),
        };
        match Err::<(), _>(error!("{message}")).unavailable() {
            Err(e) => e,
            Ok(()) => error!("{message}"),
        }
    }
}

/// How long to wait before trying a full server again, the first time; twice as long each time
/// after, up to `FULL_RETRY_MOST`, each wait a random 50% to 100% of that so that a herd started
/// in the same second does not come back in step.
const FULL_RETRY_FIRST: Duration = Duration::from_millis(50);
const FULL_RETRY_MOST: Duration = Duration::from_secs(1);
/// The least time left for a try of a full server: less would fail for want of time, and say so
/// rather than that the server is full.
const FULL_LAST_TRY: Duration = Duration::from_millis(100);

/// How long a connection may take, and what the user knows that limit as: a run's first
/// connection has the whole `--connect-timeout`; a reconnect during a renewal only what the
/// lease leaves it.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub most: Duration,
    pub named: &'static str,
}

impl Budget {
    pub const CONNECT_TIMEOUT: &'static str = "--connect-timeout";
    pub const RENEWAL: &'static str = "a renewal's limit, a fifth of --ttl";

    /// The connect timeout, or `renewal` where that is sooner (a connection made for a renewal).
    pub fn connect_or_renewal(connect_timeout: Duration, renewal: Duration) -> Budget {
        if renewal < connect_timeout {
            Budget {
                most: renewal,
                named: Budget::RENEWAL,
            }
        } else {
            Budget {
                most: connect_timeout,
                named: Budget::CONNECT_TIMEOUT,
            }
        }
    }

    pub fn connect_timeout(most: Duration) -> Budget {
        Budget {
            most,
            named: Budget::CONNECT_TIMEOUT,
        }
    }
}

/// Connects with `connect` (given the budget left), trying again while the server answers that
/// its connection slots are all taken (`is_full`): a full server is busy, not unreachable. Gives
/// up when `budget` is spent, then naming the server's limit (`limit`, as `max_connections`) and
/// the budget's, or at once when `stop` says so.
pub fn connect_while_full<T, C>(
    budget: Budget,
    stop: &Stop,
    limit: &str,
    is_full: impl Fn(&Fault<C>) -> bool,
    mut connect: impl FnMut(Duration) -> Result<T, Fault<C>>,
) -> Result<T, Fault<C>> {
    let Budget {
        most: budget,
        named,
    } = budget;
    let start = Instant::now();
    let mut backoff = FULL_RETRY_FIRST;
    let full = |fault: &Fault<C>| {
        Fault::Full(format!(
            "{}: the server's {limit} connections are all taken, still after {} ({named})",
            fault.message(),
            dlock_core::text::duration(start.elapsed())
        ))
    };
    let mut last_full = None;
    // Bounded by `budget`: every turn pauses, and one with no time left to pause gives up.
    loop {
        let left = budget.saturating_sub(start.elapsed());
        let fault = match (connect(left), &last_full) {
            (Err(fault), _) if is_full(&fault) => fault,
            // A last try the budget ran out on: the server was full when it last answered.
            (Err(_), Some(last)) if start.elapsed() >= budget => return Err(full(last)),
            (result, _) => return result,
        };
        // The last pause ends in time for one last try of at least `FULL_LAST_TRY`.
        let left = budget.saturating_sub(start.elapsed() + FULL_LAST_TRY);
        let pause = jittered(backoff).min(left);
        if pause.is_zero() {
            return Err(full(&fault));
        }
        if !stop.sleep(pause) {
            return Err(Fault::Unreachable(STOPPED.into()));
        }
        backoff = (backoff * 2).min(FULL_RETRY_MOST);
        last_full = Some(fault);
    }
}

/// A random 50% to 100% of `d` (std's hasher keys are random per process).
fn jittered(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let share = hasher.finish() % 512;
    d / 2 + d / 2 * u32::try_from(share).unwrap_or(0) / 512
}

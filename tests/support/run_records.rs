//! The run records stores keep of a lock's last run and last success, as a script reads them raw:
//! `run1 TOKEN ACQUIRED_MS ENDED_MS ENDING PID OWNER HOST`, then a tab and the message if any;
//! ENDED_MS and ENDING are `-` until the run ends.

/// One record, field by field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    pub token: u64,
    pub acquired_ms: u64,
    pub ended_ms: Option<u64>,
    pub ending: Option<String>,
    pub pid: u32,
    pub owner: String,
    pub host: String,
    pub message: Option<String>,
}

impl RunRecord {
    /// Reads `raw`, which must be such a record (the test fails otherwise).
    pub fn parse(raw: &str) -> RunRecord {
        let mut fields = raw.splitn(8, ' ');
        let mut next = || {
            fields
                .next()
                .unwrap_or_else(|| panic!("not a run record: {raw:?}"))
        };
        assert_eq!(next(), "run1", "{raw:?}");
        let token = number(next(), raw);
        let acquired_ms = number(next(), raw);
        let ended_ms = match next() {
            "-" => None,
            ms => Some(number(ms, raw)),
        };
        let ending = match next() {
            "-" => None,
            word => Some(word.to_owned()),
        };
        assert_eq!(ended_ms.is_some(), ending.is_some(), "{raw:?}");
        let pid = number(next(), raw);
        let owner = next().to_owned();
        let rest = next();
        let (host, message) = match rest.split_once('\t') {
            Some((host, message)) => (host.to_owned(), Some(message.to_owned())),
            None => (rest.to_owned(), None),
        };
        assert!(
            owner.len() == 32 && owner.bytes().all(|b| b.is_ascii_hexdigit()),
            "{raw:?}"
        );
        assert!(!host.is_empty(), "{raw:?}");
        if let Some(ended) = ended_ms {
            assert!(ended >= acquired_ms, "ended before it began: {raw:?}");
        }
        RunRecord {
            token,
            acquired_ms,
            ended_ms,
            ending,
            pid,
            owner,
            host,
            message,
        }
    }
}

fn number<T: std::str::FromStr>(word: &str, raw: &str) -> T {
    word.parse()
        .unwrap_or_else(|_| panic!("{word:?} is not a number in the run record {raw:?}"))
}

/// Milliseconds since the epoch by this machine's clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64
}

/// `raw`, a record, with its times (acquired, and ended if it has) moved `by_ms` later: a record
/// dated in the future, as a store whose clock was wrong, or a forger, would keep it.
pub fn dated_later(raw: &str, by_ms: u64) -> String {
    let mut fields: Vec<String> = raw.splitn(8, ' ').map(str::to_owned).collect();
    for field in &mut fields[2..4] {
        if field != "-" {
            *field = (number::<u64>(field, raw) + by_ms).to_string();
        }
    }
    fields.join(" ")
}

/// Thirty days in ms, how far `dated_later` moves the records of the tests that forge them.
pub const THIRTY_DAYS_MS: u64 = 30 * 24 * 3600 * 1000;

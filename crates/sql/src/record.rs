//! A holder's or a waiter's row as both SQL backends read it: each field as the row has it (other
//! clients may write these tables), checked field by field into a holder, or else an unreadable
//! holder counted as the server counts it.

use std::fmt::Display;
use std::time::SystemTime;

use dlock_core::lock::{Holder, Kept, Mode, Token};

/// A row's fields, as read.
pub struct RowText {
    pub mode: String,
    pub owner: String,
    /// The token as written; `None`: NULL (a waiter's).
    pub token: Option<String>,
    pub since: String,
    pub pid: String,
    pub host: String,
    pub message: Option<String>,
    /// The lease's end, and what `--min-hold` keeps, by the server's clock.
    pub expires_at: Option<SystemTime>,
    pub kept_until: Option<SystemTime>,
    pub kept: Option<Kept>,
}

impl RowText {
    /// The holder (or, `waiting`, the waiter) the row says, if every field reads: a waiter has no
    /// token yet, a holder one above 0.
    pub fn holder(&self, waiting: bool) -> Option<Holder> {
        let token = match (&self.token, waiting) {
            (None, true) => None,
            (Some(t), false) => Some(t.parse().ok().filter(|&t: &Token| t > 0)?),
            _ => return None,
        };
        let holder = Holder::checked(
            Mode::from_wire(&self.mode)?,
            &self.owner,
            &self.host,
            self.pid.parse().ok()?,
            self.since.parse().ok()?,
            token,
        )?
        .with_message(self.message.as_deref())?;
        Some(Holder {
            expires_at: self.expires_at,
            kept_until: self.kept_until,
            kept: self.kept.filter(|_| self.kept_until.is_some()),
            ..holder
        })
    }

    /// The row as an unreadable holder: counted as shared or limit where it says so (as the
    /// server counts it), else as exclusive, with its fields for the user.
    pub fn unreadable(&self) -> Holder {
        let counted = match Mode::from_wire(&self.mode) {
            Some(m @ (Mode::Shared | Mode::Limit(_))) => m,
            _ => Mode::Exclusive,
        };
        let mut raw = format!(
            "{} {} {} {} {}",
            self.mode,
            self.token.as_deref().unwrap_or(""),
            self.since,
            self.pid,
            self.host
        );
        if let Some(message) = &self.message {
            raw.push('\t');
            raw.push_str(message);
        }
        Holder::unreadable(counted, &self.owner, &raw)
    }
}

/// The line `list` shows for a row under `location` whose `name` is no lock name (`why`).
pub fn unreadable_name(name: &str, location: &str, why: impl Display) -> String {
    format!(
        "row {:?} in {location}: {why}",
        dlock_core::lock::escaped(name, 80)
    )
}

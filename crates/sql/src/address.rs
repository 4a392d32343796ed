//! What the `postgres://` and `mysql://` URLs have alike: how the connection is protected, and
//! the prefix of dlock's table names.

use dlock_core::error;
use dlock_core::error::FailAs;

/// Where dlock keeps its tables unless the URL says otherwise.
pub const DEFAULT_PREFIX: &str = "dlock_";

/// Longest prefix. PostgreSQL names are at most 63 bytes, and the longest name dlock makes there
/// is the prefix and `queue_by_name`, or the prefix and a 32-digit owner id (a channel); a MySQL
/// lock key (`GET_LOCK`) is the prefix and 32 hex digits, at most 64 characters.
pub const MAX_PREFIX_BYTES: usize = 30;

/// How the connection is protected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tls {
    /// Plain TCP (`sslmode=disable`, `ssl-mode=DISABLED`, or none given).
    Off,
    /// TLS with the server's certificate checked against the trusted CAs, without requiring the
    /// URL's host name in it (`sslmode=require` or `verify-ca`; `ssl-mode=REQUIRED` or
    /// `VERIFY_CA`).
    Chain,
    /// TLS with the certificate checked and made out to the URL's host (`sslmode=verify-full`,
    /// `ssl-mode=VERIFY_IDENTITY`).
    Full,
}

/// The `prefix=` of the URL `url` (`PostgreSQL URL postgres://h/db`), for the names of dlock's
/// tables: a plain, unquoted name in either server, whatever its case settings. Else a usage error.
pub fn prefix(url: &str, value: &str) -> error::Result<String> {
    let plain = !value.is_empty()
        && value.len() <= MAX_PREFIX_BYTES
        && value.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !plain {
        return Err(error!(
            "{url}: the table prefix must be 1 to {MAX_PREFIX_BYTES} lowercase letters, digits \
             and `_`, starting with a letter or `_`"
        ))
        .usage();
    }
    Ok(value.to_owned())
}

/// The roles (PostgreSQL) or users (MySQL) of the URL's `owner=` (comma-separated, `%`-encoding
/// allowed), whose tables and routines dlock uses besides its own. Else a usage error.
pub fn owners(url: &str, value: &str) -> error::Result<Vec<String>> {
    let bad = || {
        Err(error!(
            "{url}: owner= takes one or more names separated by commas (`owner=admin,ops`)"
        ))
        .usage()
    };
    let mut names = Vec::new();
    for part in value.split(',') {
        let Some(name) = dlock_core::text::percent_decode(part) else {
            return bad();
        };
        if name.is_empty() || name.chars().any(char::is_control) {
            return bad();
        }
        names.push(name);
    }
    Ok(names)
}

//! The `postgres://` URL: what dlock reads from it (TLS, the table prefix), and what it hands to
//! the client library. Messages show it only through `dlock_core::url::redact`.

use std::str::FromStr;

use dlock_core::error;
use dlock_core::error::FailAs;

use dlock_core::url::redact;

pub use crate::address::Tls;
use crate::address::{owners, prefix as table_prefix, DEFAULT_PREFIX};

/// A parsed `--url`.
pub struct PgUrl {
    pub config: tokio_postgres::Config,
    pub tls: Tls,
    /// A PEM file of CAs to trust (`sslrootcert=`), instead of SSL_CERT_FILE or the system's.
    pub root_cert: Option<String>,
    /// The table prefix (`prefix=`).
    pub prefix: String,
    /// Roles whose tables and functions dlock uses besides its own (`owner=ROLE,ROLE`).
    pub trusted: Vec<String>,
    /// The URL for messages: credentials and query hidden.
    pub shown: String,
}

impl PgUrl {
    pub fn parse(url: &str) -> error::Result<PgUrl> {
        let shown = redact(url);
        let usage = |why: String| Err(error!("{why}")).usage();
        let Some(rest) = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
        else {
            return usage(format!(
                "PostgreSQL URL {shown} must start with postgres:// or postgresql://"
            ));
        };
        // The library takes the credentials up to the first `@`, messages (`redact`) up to the
        // last: with two, dlock would reach a host no message names.
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        if authority.matches('@').count() > 1 {
            return usage(format!(
                "malformed PostgreSQL URL {shown}: write `@`, `/`, `?` and `#` in a user name or \
                 password as %40, %2F, %3F and %23"
            ));
        }
        let (base, query) = match rest.split_once('?') {
            Some((base, query)) => (base, query),
            None => (rest, ""),
        };
        let mut tls = Tls::Off;
        let mut root_cert = None;
        let mut prefix = DEFAULT_PREFIX.to_owned();
        let mut trusted = Vec::new();
        let mut passed = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "sslmode" => {
                    tls = match value {
                        "disable" => Tls::Off,
                        "require" | "verify-ca" => Tls::Chain,
                        "verify-full" => Tls::Full,
                        _ => {
                            return usage(format!(
                                "PostgreSQL URL {shown}: sslmode must be disable, require, \
                                 verify-ca or verify-full"
                            ))
                        }
                    }
                }
                "sslrootcert" => root_cert = Some(value.to_owned()),
                "prefix" => prefix = table_prefix(&format!("PostgreSQL URL {shown}"), value)?,
                "owner" => trusted.extend(owners(&format!("PostgreSQL URL {shown}"), value)?),
                _ => passed.push(pair),
            }
        }
        let mut library_url = format!("postgresql://{base}");
        if !passed.is_empty() {
            library_url.push('?');
            library_url.push_str(&passed.join("&"));
        }
        // The library's message names the option, never its value.
        let config = tokio_postgres::Config::from_str(&library_url)
            .map_err(|e| error!("cannot read PostgreSQL URL {shown}: {e}"))
            .usage()?;
        match config.get_hosts() {
            [tokio_postgres::config::Host::Tcp(_)] => {}
            [] => return usage(format!("PostgreSQL URL {shown} names no host")),
            _ => {
                return usage(format!(
                    "PostgreSQL URL {shown}: give one TCP host (a socket directory or several \
                     hosts are not supported)"
                ))
            }
        }
        if config.get_dbname().is_none() {
            return usage(format!("PostgreSQL URL {shown} names no database"));
        }
        Ok(PgUrl {
            config,
            tls,
            root_cert,
            prefix,
            trusted,
            shown,
        })
    }

    /// Where locks live, for messages and the nested-run check.
    pub fn location(&self) -> String {
        self.shown.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_tls_prefix_and_keep_the_rest_for_the_library() {
        let url = PgUrl::parse(
            "postgresql://al:SECRET@db.example:6543/app?sslmode=verify-full&prefix=x_&application_name=a&owner=adm,ops%2D1&owner=x",
        )
        .unwrap();
        assert_eq!(url.trusted, ["adm", "ops-1", "x"]);
        assert_eq!(url.tls, Tls::Full);
        assert_eq!(url.prefix, "x_");
        assert_eq!(url.config.get_ports(), [6543]);
        assert_eq!(url.config.get_dbname(), Some("app"));
        assert!(!url.location().contains("SECRET"));
        let plain = PgUrl::parse("postgres://h/db").unwrap();
        assert_eq!((plain.tls, plain.prefix.as_str()), (Tls::Off, "dlock_"));
    }

    #[test]
    fn bad_urls_are_refused_without_showing_the_password() {
        for url in [
            "mysql://u:SECRET@h/db",
            "postgres://u:SECRET@h/db?sslmode=maybe",
            "postgres://u:SECRET@h/db?prefix=Bad;drop",
            "postgres://u:SECRET@h/db?owner=",
            "postgres://u:SECRET@h/db?owner=a,,b",
            "postgres://u:SECRET@h",
            "postgres://u:SECRET@h:notaport/db",
            "postgres://u:SECRET@x@h/db",
        ] {
            let e = PgUrl::parse(url).err().expect(url);
            let text = format!("{e:#}");
            assert!(!text.contains("SECRET"), "{text}");
            assert!(matches!(e, error::Error::Usage(_)), "{text}");
        }
    }

    proptest::proptest! {
        /// A password from a password file reaches PostgreSQL as the password, whatever `@`, `:`
        /// or `/` the database's name and `application_name` hold, and they stay as they were.
        #[test]
        fn a_password_file_gives_the_password_postgres_reads(
            user in "[a-z]{1,6}",
            port in proptest::option::of(1u16..),
            database in "[a-z0-9@:._-]{1,10}",
            app in "[a-z0-9@:/._-]{1,10}",
            password in "[ -~]{1,12}",
        ) {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            let url = format!("postgres://{user}@h{port}/{database}?application_name={app}");
            let given = dlock_core::url::insert_password(&url, &password)
                .expect("taken")
                .expect("no password");
            let parsed = PgUrl::parse(&given).expect("parses");
            proptest::prop_assert_eq!(parsed.config.get_password(), Some(password.as_bytes()));
            proptest::prop_assert_eq!(parsed.config.get_user(), Some(user.as_str()));
            proptest::prop_assert_eq!(parsed.config.get_dbname(), Some(database.as_str()));
            proptest::prop_assert_eq!(parsed.config.get_application_name(), Some(app.as_str()));
        }
    }
}

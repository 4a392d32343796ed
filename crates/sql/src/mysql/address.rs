//! The `mysql://` URL: what dlock reads from it (TLS, the table prefix) and the client options it
//! makes of it. Messages show it only through `dlock_core::url::redact`.

use dlock_core::error;
use dlock_core::error::FailAs;

use dlock_core::text::percent_decode;
use dlock_core::url::{redact, server, BadServer, Server};

pub use crate::address::Tls;
use crate::address::{owners, prefix as table_prefix, DEFAULT_PREFIX};

const DEFAULT_PORT: u16 = 3306;

/// A parsed `--url`.
pub struct MyUrl {
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    pub password: Option<String>,
    pub database: String,
    pub tls: Tls,
    /// A PEM file of CAs to trust (`ssl-ca=`), instead of the built-in web roots.
    pub ssl_ca: Option<String>,
    /// The table prefix (`prefix=`).
    pub prefix: String,
    /// Users whose procedures and triggers dlock uses besides its own (`owner=USER` for
    /// any host, `owner=USER@HOST` for one account; several separated by commas).
    pub trusted: Vec<String>,
    /// The URL for messages: credentials and query hidden.
    pub shown: String,
}

impl MyUrl {
    pub fn parse(url: &str) -> error::Result<MyUrl> {
        let shown = redact(url);
        let usage = |why: String| Err(error!("{why}")).usage();
        // MariaDB's own name for the same server.
        let rest = url
            .strip_prefix("mysql://")
            .or_else(|| url.strip_prefix("mariadb://"));
        let Some(rest) = rest else {
            return usage(format!(
                "MySQL URL {shown} must start with mysql:// (or mariadb://)"
            ));
        };
        let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, database) = base.split_once('/').unwrap_or((base, ""));
        let (credentials, host_port) = match authority.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, authority),
        };
        let (user, password) = match credentials {
            None => (None, None),
            Some(c) => {
                let (u, p) = match c.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (c, None),
                };
                let decode = |s: &str| {
                    percent_decode(s).ok_or_else(|| {
                        error!("MySQL URL {shown}: the user or password is not valid %-encoding")
                    })
                };
                let user = decode(u).usage()?;
                let password = p.map(decode).transpose().usage()?;
                ((!user.is_empty()).then_some(user), password)
            }
        };
        // `host`, `host:port`, `[v6]`, `[v6]:port`.
        let Server { host, port } = match server(host_port, Some(DEFAULT_PORT)) {
            Ok(server) => server,
            Err(BadServer::Unclosed) => {
                return usage(format!("MySQL URL {shown}: a `[` without its `]`"))
            }
            Err(BadServer::NoHost) => return usage(format!("MySQL URL {shown} names no host")),
            Err(BadServer::BadHost(host)) => {
                return usage(format!("MySQL URL {shown}: bad host {host:?}"))
            }
            Err(BadServer::Malformed | BadServer::BadPort(_) | BadServer::NoPort) => {
                return usage(format!("MySQL URL {shown}: the port must be 1 to 65535"))
            }
        };
        if database.is_empty() || database.contains('/') {
            return usage(format!(
                "MySQL URL {shown} names no database (mysql://HOST/DATABASE)"
            ));
        }
        let database = percent_decode(database)
            .ok_or_else(|| error!("MySQL URL {shown}: the database is not valid %-encoding"))
            .usage()?;
        let mut tls = Tls::Off;
        let mut ssl_ca = None;
        let mut prefix = DEFAULT_PREFIX.to_owned();
        let mut trusted = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "ssl-mode" | "ssl_mode" | "sslmode" => {
                    tls = match value.to_ascii_uppercase().as_str() {
                        "DISABLED" => Tls::Off,
                        "REQUIRED" | "VERIFY_CA" => Tls::Chain,
                        "VERIFY_IDENTITY" => Tls::Full,
                        _ => {
                            return usage(format!(
                                "MySQL URL {shown}: ssl-mode must be DISABLED, REQUIRED, \
                                 VERIFY_CA or VERIFY_IDENTITY"
                            ))
                        }
                    }
                }
                "ssl-ca" | "ssl_ca" => {
                    let path = percent_decode(value)
                        .filter(|p| !p.is_empty())
                        .ok_or_else(|| error!("MySQL URL {shown}: ssl-ca needs a file"))
                        .usage()?;
                    ssl_ca = Some(path);
                }
                "prefix" => prefix = table_prefix(&format!("MySQL URL {shown}"), value)?,
                "owner" => trusted.extend(owners(&format!("MySQL URL {shown}"), value)?),
                _ => {
                    // Only the key: its value may be a secret.
                    let key = dlock_core::lock::escaped(key, 40);
                    return usage(format!(
                        "MySQL URL {shown}: unknown option {key:?} (known: ssl-mode, ssl-ca, \
                         prefix, owner)"
                    ));
                }
            }
        }
        if ssl_ca.is_some() && tls == Tls::Off {
            return usage(format!(
                "MySQL URL {shown}: ssl-ca needs ssl-mode=REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
            ));
        }
        Ok(MyUrl {
            host,
            port,
            user,
            password,
            database,
            tls,
            ssl_ca,
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
    fn urls_give_host_credentials_tls_and_prefix() {
        let url = MyUrl::parse(
            "mysql://al:S%40CRET@db.example:3307/app?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem&prefix=x_&owner=adm,ops@10.0.0.%25",
        )
        .unwrap();
        assert_eq!((url.host.as_str(), url.port), ("db.example", 3307));
        assert_eq!(url.user.as_deref(), Some("al"));
        assert_eq!(url.password.as_deref(), Some("S@CRET"));
        assert_eq!(url.database, "app");
        assert_eq!(url.tls, Tls::Full);
        assert_eq!(url.ssl_ca.as_deref(), Some("/ca.pem"));
        assert_eq!(url.prefix, "x_");
        assert_eq!(url.trusted, ["adm", "ops@10.0.0.%"]);
        assert!(!url.location().contains("CRET"));
        let v6 = MyUrl::parse("mysql://[::1]/db").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 3306));
        let v6 = MyUrl::parse("mysql://[::1]:3307/db").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 3307));
        let plain = MyUrl::parse("mysql://h/db").unwrap();
        assert_eq!(
            (plain.port, plain.tls, plain.prefix.as_str()),
            (3306, Tls::Off, "dlock_")
        );
        assert_eq!(plain.user, None);
        let maria = MyUrl::parse("mariadb://al@h:3307/app").unwrap();
        assert_eq!(
            (maria.host.as_str(), maria.port, maria.user.as_deref()),
            ("h", 3307, Some("al"))
        );
    }

    #[test]
    fn bad_urls_are_refused_without_showing_the_password() {
        for bad in [
            "postgres://u:SECRET@h/db",
            "mysql://u:SECRET@h",
            "mysql://u:SECRET@h:0/db",
            "mysql://u:SECRET@h:99999/db",
            "mysql://u:SECRET@[::1/db",
            "mysql://u:SECRET@h:1:2/db",
            "mysql://u:SECRET@a%20b/db",
            "mysql://u:SECRET@a b/db",
            "mysql://u:SECRET@/db",
            "mysql://u:SECRET@h/db?ssl-mode=SOMETIMES",
            "mysql://u:SECRET@h/db?prefix=Bad-Prefix",
            "mysql://u:SECRET@h/db?password=SECRET",
            "mysql://u:SECRET@h/db?ssl-ca=/x.pem",
            "mysql://u:SECRET@h/db?owner=",
            "mysql://u:SECRET@h/db?owner=a,,b",
        ] {
            let e = MyUrl::parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(!format!("{e:#}").contains("SECRET"), "{e:#}");
        }
    }

    proptest::proptest! {
        /// A password from a password file reaches MySQL as the password, whatever `@`, `:` or
        /// `/` the database's name and the CA file's path hold, and they stay as they were.
        #[test]
        fn a_password_file_gives_the_password_mysql_reads(
            user in "[a-z]{1,6}",
            port in proptest::option::of(1u16..),
            database in "[a-z0-9@:._-]{1,10}",
            ca in "/[a-z0-9@:/._-]{0,10}",
            password in "[ -~]{1,12}",
        ) {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            let url = format!("mysql://{user}@h{port}/{database}?ssl-mode=REQUIRED&ssl-ca={ca}");
            let given = dlock_core::url::insert_password(&url, &password)
                .expect("taken")
                .expect("no password");
            let parsed = MyUrl::parse(&given).expect("parses");
            proptest::prop_assert_eq!(parsed.password.as_deref(), Some(password.as_str()));
            proptest::prop_assert_eq!(parsed.user.as_deref(), Some(user.as_str()));
            proptest::prop_assert_eq!(parsed.database, database);
            proptest::prop_assert_eq!(parsed.ssl_ca, Some(ca));
        }
    }
}

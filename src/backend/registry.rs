//! The registry of backends: one `Descriptor` per store (its name, URL schemes, help lines, how its
//! address is written, the Cargo feature that builds it, its limits, and how to open it), from
//! which `--backend`'s values, URL scheme detection, the help, the man pages, the completions,
//! `--version` and `open` are derived. Adding a backend is its crate, one entry here, its feature
//! and one line in the contract suite: the checklist is in docs/DESIGN.md, "Adding a backend".

use crate::failure::FromStore;
use std::time::Duration;

use super::{Backend, StoreConfig};

/// A store's `open`: its backend, as configured, or an error tagged with the exit status it maps to.
pub type Open = fn(&StoreConfig) -> anyhow::Result<Box<dyn Backend>>;

/// `Some` of the `open` of the store `$backend` where this build has the feature `$feature` (and
/// so the store's crate), `None` where it left it out.
macro_rules! opener {
    ($feature:literal, $backend:ty) => {{
        #[cfg(feature = $feature)]
        let open: Option<Open> = Some(|config| Ok(Box::new(<$backend>::open(config).or_store()?)));
        #[cfg(not(feature = $feature))]
        let open: Option<Open> = None;
        open
    }};
}

/// Which store holds the locks. Every kind exists in every build, so that a name or a URL of a
/// backend this build left out is recognised, and refused naming the feature to build with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendKind {
    /// The default (`--backend`'s, as clap's definition has it too).
    #[default]
    File,
    Redis,
    Zk,
    Etcd,
    Postgres,
    Mysql,
    Elasticsearch,
}

/// What the command line, the help, the man pages, the completions and `--version` say of a
/// backend: the one place they all read (see `BACKENDS`).
pub struct Descriptor {
    pub kind: BackendKind,
    /// `-b`'s value, DLOCK_BACKEND's and the configuration file's.
    pub name: &'static str,
    /// The URL schemes its parser takes, with `://` (the file backend also takes a plain path).
    pub schemes: &'static [&'static str],
    /// The name users know the store by, for the `--backend` help line.
    pub store: &'static str,
    /// Its line in `--backend`'s list of values.
    pub help: &'static str,
    /// How `--url` is written for it.
    pub address: &'static str,
    /// The Cargo feature that builds it (`None`: always built).
    pub feature: Option<&'static str>,
    /// Whether its address is a directory on this machine (a path, or a URL of its scheme), not a
    /// server: a nested dlock gets it made absolute, a hold knows it by its real path, and no
    /// password goes into it.
    pub local: bool,
    /// Whether it takes `--replicas N` (a URL's own `?replicas=N` wins); another backend refuses
    /// both, and ignores DLOCK_REPLICAS.
    pub replicas: bool,
    /// The longest `--ttl` it can keep, when shorter than what `--ttl` takes at all (a year).
    pub max_ttl: Option<Limit>,
    /// Whether it keeps the concurrency group records `run --supersede` and
    /// `--cancel-in-progress` need (`Backend::groups`); the options are refused (64) on another.
    pub groups: bool,
    /// Its store's `open`, where this build has it (`opener!`).
    pub open: Option<Open>,
}

impl Descriptor {
    /// Whether this build has it.
    pub fn built(&self) -> bool {
        self.open.is_some()
    }
}

/// A bound a backend puts on a value, and why: the message that refuses more says both.
pub struct Limit {
    pub at_most: Duration,
    pub because: &'static str,
}

/// ZooKeeper's longest lease: 24 days, the largest whole number of days a session timeout (a
/// signed 32-bit count of milliseconds, at most 24.8 days) can carry; the session is the lease.
const ZK_MAX_TTL: Limit = Limit {
    at_most: Duration::from_secs(24 * 24 * 3600),
    because: "ZooKeeper counts a session timeout in a 32-bit number of milliseconds",
};

/// Every backend, built or not, in the order help and `--version` list them.
pub const BACKENDS: [Descriptor; 7] = [
    Descriptor {
        kind: BackendKind::File,
        name: "file",
        schemes: &["file://"],
        store: "lock files on this machine",
        help: "Lock files in a local directory (flock(2)); no server, one machine",
        address: "a directory (or file:///dir) for file",
        feature: None,
        local: true,
        replicas: false,
        max_ttl: None,
        groups: true,
        open: Some(|config| Ok(Box::new(dlock_file::FileBackend::open(config).or_store()?))),
    },
    Descriptor {
        kind: BackendKind::Redis,
        name: "redis",
        schemes: &[
            "redis://",
            "rediss://",
            "redis+sentinel://",
            "redis+cluster://",
            "rediss+cluster://",
        ],
        store: "Redis",
        help: "A Redis server (or several, with Redlock); cluster-wide",
        // Split so that no word is wider than a terminal: `--help` is at most 80 columns.
        address: "redis://[user:password@]host:port[/db][?replicas=N] (give it 3, 5, ... times \
                  for Redlock); \
                  redis+sentinel://[user:password@]host:port,host:port/MASTER[/db] with \
                  ?sentinel_password=P if the sentinels want one; \
                  redis+cluster://[user:password@]host:port,host:port (rediss+cluster:// for TLS)",
        feature: Some("redis"),
        local: false,
        replicas: true,
        max_ttl: None,
        groups: true,
        open: opener!("redis", dlock_redis::RedisBackend),
    },
    Descriptor {
        kind: BackendKind::Zk,
        name: "zk",
        schemes: &["zk://"],
        store: "ZooKeeper",
        help: "A ZooKeeper ensemble; cluster-wide",
        address: "zk://[user:password@]host:port,host:port[/chroot]",
        feature: Some("zk"),
        local: false,
        replicas: false,
        max_ttl: Some(ZK_MAX_TTL),
        groups: true,
        open: opener!("zk", dlock_zk::ZkBackend),
    },
    Descriptor {
        kind: BackendKind::Etcd,
        name: "etcd",
        schemes: &["etcd://", "etcds://"],
        store: "etcd",
        help: "An etcd cluster; cluster-wide",
        address: "etcd://[user:password@]host:port,host:port (etcds:// for TLS)",
        feature: Some("etcd"),
        local: false,
        replicas: false,
        max_ttl: None,
        groups: true,
        open: opener!("etcd", dlock_etcd::EtcdBackend),
    },
    Descriptor {
        kind: BackendKind::Postgres,
        name: "postgres",
        schemes: &["postgres://", "postgresql://"],
        store: "PostgreSQL",
        help: "A PostgreSQL database (tables of dlock's own); cluster-wide",
        address: "postgres://...",
        feature: Some("postgres"),
        local: false,
        replicas: false,
        max_ttl: None,
        groups: true,
        open: opener!("postgres", dlock_sql::postgres::PgBackend),
    },
    Descriptor {
        kind: BackendKind::Mysql,
        name: "mysql",
        schemes: &["mysql://", "mariadb://"],
        store: "MySQL",
        help: "A MySQL or MariaDB database (tables of dlock's own); cluster-wide",
        address: "mysql://... (or mariadb://...)",
        feature: Some("mysql"),
        local: false,
        replicas: false,
        max_ttl: None,
        groups: true,
        open: opener!("mysql", dlock_sql::mysql::MyBackend),
    },
    Descriptor {
        kind: BackendKind::Elasticsearch,
        name: "elasticsearch",
        schemes: &[
            "elasticsearch://",
            "elasticsearchs://",
            "opensearch://",
            "opensearchs://",
        ],
        store: "Elasticsearch",
        help: "An Elasticsearch or OpenSearch cluster (an index of dlock's own); cluster-wide",
        address: "elasticsearch://[user:password@]host:port,host:port[/index] \
                  (elasticsearchs:// for HTTPS; opensearch://, opensearchs:// alike)",
        feature: Some("elasticsearch"),
        local: false,
        replicas: false,
        max_ttl: None,
        groups: true,
        open: opener!("elasticsearch", dlock_elasticsearch::EsBackend),
    },
];

/// The backends that take `--replicas`, as a message names them (`the redis backend`).
pub fn replicas_help() -> String {
    let names: Vec<&str> = BACKENDS
        .iter()
        .filter(|b| b.replicas)
        .map(|b| b.name)
        .collect();
    format!("the {} backend", or_list(&names))
}

/// The backends this build has.
pub fn built() -> impl Iterator<Item = &'static Descriptor> {
    BACKENDS.iter().filter(|b| b.built())
}

/// `a, b or c`.
fn or_list(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// `--backend`'s help line, naming the stores this build has.
pub fn backend_help() -> String {
    let stores: Vec<&str> = built().map(|b| b.store).collect();
    format!("Where locks live: {}", or_list(&stores))
}

/// `--url`'s help, with the address of each backend this build has.
pub fn url_help() -> String {
    let addresses: Vec<&str> = built().map(|b| b.address).collect();
    let mut help = format!("The backend's address: {}", addresses.join(", "));
    if !help.ends_with('.') {
        help.push('.');
    }
    help + " One --url, DLOCK_URL and the configuration file's url may list several, separated \
            by commas or spaces"
}

/// `0.1.0 (backends: file, redis, ...)`, for `--version`.
pub fn version() -> String {
    let names: Vec<&str> = built().map(|b| b.name).collect();
    format!(
        "{} (backends: {})",
        env!("CARGO_PKG_VERSION"),
        names.join(", ")
    )
}

/// The one line for a backend this build left out.
pub fn not_built(descriptor: &Descriptor) -> String {
    let feature = descriptor.feature.unwrap_or(descriptor.name);
    format!(
        "this dlock was built without the {} backend: cargo install {} --features {feature}",
        descriptor.name,
        env!("CARGO_PKG_NAME")
    )
}

/// The backend named `name` (`-b`'s value), built or not.
pub fn kind_named(name: &str) -> Option<BackendKind> {
    BACKENDS.iter().find(|b| b.name == name).map(|b| b.kind)
}

/// The backend `url` names: its scheme's, or the file backend's for a path (no `://`); `None` for
/// a scheme no backend has.
pub fn kind_of_url(url: &str) -> Option<BackendKind> {
    match by_scheme(url) {
        Some(descriptor) => Some(descriptor.kind),
        None => (!url.contains("://")).then_some(BackendKind::File),
    }
}

/// The backend whose URL scheme `url` has, built or not (`None` for a plain path or an unknown
/// scheme).
pub fn by_scheme(url: &str) -> Option<&'static Descriptor> {
    BACKENDS
        .iter()
        .find(|b| b.schemes.iter().any(|scheme| url.starts_with(scheme)))
}

impl BackendKind {
    pub fn descriptor(self) -> &'static Descriptor {
        match BACKENDS.iter().find(|b| b.kind == self) {
            Some(descriptor) => descriptor,
            // Every kind has its entry (a unit test says so).
            None => &BACKENDS[0],
        }
    }

    pub fn as_str(self) -> &'static str {
        self.descriptor().name
    }

    /// Why `ttl` is too long for this backend (`too long for the zk backend: at most 24d
    /// (ZooKeeper ...)`), or `None` when it keeps a lease that long.
    pub fn refuses_ttl(self, ttl: Duration) -> Option<String> {
        let descriptor = self.descriptor();
        let limit = descriptor.max_ttl.as_ref().filter(|l| ttl > l.at_most)?;
        Some(format!(
            "too long for the {} backend: at most {} ({})",
            descriptor.name,
            crate::text::duration(limit.at_most),
            limit.because
        ))
    }

    /// The directory `url` names, for a backend whose address is one (see `Descriptor::local`):
    /// the path, or what follows the scheme; `None` for a server's address.
    pub fn directory(self, url: &str) -> Option<&str> {
        let descriptor = self.descriptor();
        if !descriptor.local {
            return None;
        }
        let path = descriptor
            .schemes
            .iter()
            .find_map(|scheme| url.strip_prefix(scheme));
        Some(path.unwrap_or(url))
    }

    /// Whether `url` is an address of this backend: one of its schemes (a local one, the file
    /// backend: also a path, anything without `://`).
    pub fn takes(self, url: &str) -> bool {
        let schemes = self.descriptor().schemes;
        schemes.iter().any(|scheme| url.starts_with(scheme))
            || (self.descriptor().local && !url.contains("://"))
    }
}

/// `--backend`'s values: the backends built, listed with their help, and the name of one left out
/// refused with the line saying which feature builds it (on the command line, in DLOCK_BACKEND or
/// the configuration file alike).
#[derive(Clone)]
pub struct KindParser;

impl clap::builder::TypedValueParser for KindParser {
    type Value = BackendKind;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<BackendKind, clap::Error> {
        let known = value
            .to_str()
            .and_then(|name| BACKENDS.iter().find(|b| b.name == name));
        match known {
            Some(descriptor) if descriptor.built() => Ok(descriptor.kind),
            Some(descriptor) => Err(clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{}\n", not_built(descriptor)),
            )),
            // clap's own refusal, listing the values built (it accepts none: they matched above).
            None => {
                let values: Vec<clap::builder::PossibleValue> =
                    self.possible_values().into_iter().flatten().collect();
                clap::builder::PossibleValuesParser::new(values)
                    .parse_ref(cmd, arg, value)
                    .map(|_| BackendKind::File)
            }
        }
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(built().map(|b| {
            clap::builder::PossibleValue::new(b.name).help(b.help)
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::{BackendKind, BACKENDS};

    /// One entry per kind, names and schemes each claimed once, so `-b`, the URL's scheme and the
    /// help cannot disagree about a backend.
    #[test]
    fn the_table_describes_each_backend_once() {
        for kind in [
            BackendKind::File,
            BackendKind::Redis,
            BackendKind::Zk,
            BackendKind::Etcd,
            BackendKind::Postgres,
            BackendKind::Mysql,
            BackendKind::Elasticsearch,
        ] {
            assert_eq!(BACKENDS.iter().filter(|b| b.kind == kind).count(), 1);
            assert_eq!(kind.descriptor().kind, kind);
        }
        for (i, b) in BACKENDS.iter().enumerate() {
            for other in &BACKENDS[i + 1..] {
                assert_ne!(b.name, other.name);
                for scheme in b.schemes {
                    assert!(!other.schemes.contains(scheme), "{scheme}");
                }
            }
            for scheme in b.schemes {
                assert!(scheme.ends_with("://"), "{scheme}");
                assert_eq!(
                    super::by_scheme(&format!("{scheme}h:1")).map(|d| d.kind),
                    Some(b.kind)
                );
                assert!(b.kind.takes(&format!("{scheme}h:1")));
            }
        }
        assert!(BackendKind::File.takes("/var/lock/dlock"));
        assert!(!BackendKind::Redis.takes("/var/lock/dlock"));
    }

    /// A limit is below what `--ttl` takes at all (else it would never be met), and ZooKeeper's
    /// fits its session timeout, a 32-bit count of milliseconds.
    #[test]
    fn each_backend_s_longest_ttl_is_one_it_can_keep() {
        // What `--ttl` takes at all (cli/duration.rs).
        let year = std::time::Duration::from_secs(31_557_600);
        for b in &BACKENDS {
            if let Some(limit) = &b.max_ttl {
                assert!(limit.at_most < year, "{}", b.name);
                assert_eq!(b.kind.refuses_ttl(limit.at_most), None);
                let over = limit.at_most + std::time::Duration::from_millis(1);
                assert!(b
                    .kind
                    .refuses_ttl(over)
                    .is_some_and(|why| why.contains(b.name)));
            }
        }
        let zk = BackendKind::Zk
            .descriptor()
            .max_ttl
            .as_ref()
            .map(|l| l.at_most);
        assert!(zk.is_some_and(|ttl| i32::try_from(ttl.as_millis()).is_ok()));
        assert_eq!(BackendKind::Redis.refuses_ttl(year), None);
    }

    /// Cargo.toml's default features are the registry's stores in its order: `.ci/run` expects a
    /// default build's `--version` to say the file backend, then them.
    #[test]
    fn the_default_features_are_the_registry_s_stores_in_its_order() {
        let cargo = include_str!("../../Cargo.toml");
        let default = cargo
            .lines()
            .find_map(|line| line.strip_prefix("default = "))
            .expect("Cargo.toml's default features");
        let features: Vec<String> = BACKENDS
            .iter()
            .filter_map(|b| b.feature)
            .map(|f| format!("{f:?}"))
            .collect();
        assert_eq!(default, format!("[{}]", features.join(", ")));
    }

    #[test]
    fn a_backend_left_out_names_its_feature() {
        assert_eq!(
            super::not_built(BackendKind::Etcd.descriptor()),
            "this dlock was built without the etcd backend: cargo install dlock-cli --features etcd"
        );
    }
}

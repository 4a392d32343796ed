//! A build with some backends left out (Cargo features): `--version` and the help name the ones
//! built, and a left-out one asked for by name, URL, variable or configuration file is refused in
//! one line naming the feature to build with.

use crate::support::store::Store;
use crate::support::*;
use crate::STORES;

/// Every backend, by name, with its URL scheme and whether this build has it (`Store::built`), in
/// the registry's order.
fn backends() -> impl Iterator<Item = (&'static str, String, bool)> {
    let scheme = |s: &Store| format!("{}://", s.schemes[0]);
    STORES.iter().map(move |s| (s.backend, scheme(s), s.built))
}

fn built() -> Vec<&'static str> {
    backends()
        .filter(|(_, _, built)| *built)
        .map(|(name, _, _)| name)
        .collect()
}

#[test]
fn version_lists_the_backends_built() {
    let out = output({
        let mut cmd = dlock();
        cmd.arg("--version");
        cmd
    });
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "dlock {} (backends: {})\n",
            env!("CARGO_PKG_VERSION"),
            built().join(", ")
        )
    );
}

#[test]
fn help_offers_exactly_the_backends_built() {
    let out = output({
        let mut cmd = dlock();
        cmd.arg("--help");
        cmd
    });
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let help = stdout(&out);
    let values: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.contains("-b, --backend"))
        .skip_while(|l| !l.contains("Possible values:"))
        .skip(1)
        // A value's line may wrap onto the next (80 columns): those do not start with `- `.
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.trim_start().strip_prefix("- ")?.split(':').next())
        .collect();
    assert_eq!(values, built(), "{help}");
    // The help line, wrapped at 80 columns, read to its end (a blank line).
    let line = help
        .split("Where locks live:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("--backend's help line");
    for (name, store) in [
        ("redis", "Redis"),
        ("zk", "ZooKeeper"),
        ("etcd", "etcd"),
        ("postgres", "PostgreSQL"),
        ("mysql", "MySQL"),
    ] {
        let built = built().contains(&name);
        assert_eq!(line.contains(store), built, "{name}: {line}");
    }
    let url = help
        .split("-u, --url")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("--url's help");
    for (name, scheme, built) in backends() {
        if name != "file" {
            assert_eq!(url.contains(scheme.as_str()), built, "{name}: {url}");
        }
    }
}

/// A name, a URL, DLOCK_BACKEND and the configuration file's `backend` of a left-out backend: 64
/// and one line naming the feature. Only a build that leaves one out has such a backend (CI builds
/// one, see `.ci/run`).
#[test]
#[cfg(not(all(
    feature = "redis",
    feature = "zk",
    feature = "etcd",
    feature = "postgres",
    feature = "mysql"
)))]
fn a_backend_left_out_is_refused_naming_its_feature() {
    let dir = LockDir::new();
    for (name, scheme, _) in backends().filter(|(_, _, built)| !built) {
        let config = dir.path().join(format!("{name}.conf"));
        std::fs::write(&config, format!("backend = {name}\n")).unwrap();
        let url = format!("{scheme}127.0.0.1:1");
        let ways: Vec<(&str, std::process::Command)> = vec![
            ("-b", {
                let mut cmd = dlock();
                cmd.args(["-b", name, "status", "x"]);
                cmd
            }),
            ("--url", {
                let mut cmd = dlock();
                cmd.args(["-u", &url, "status", "x"]);
                cmd
            }),
            ("DLOCK_BACKEND", {
                let mut cmd = dlock();
                cmd.env("DLOCK_BACKEND", name).args(["status", "x"]);
                cmd
            }),
            ("configuration file", {
                let mut cmd = dlock();
                cmd.env("DLOCK_CONFIG", &config).args(["status", "x"]);
                cmd
            }),
        ];
        for (way, cmd) in ways {
            let out = output(cmd);
            let err = stderr(&out);
            assert_eq!(code(&out), 64, "{name} by {way}: {err}");
            assert_eq!(
                err,
                format!(
                    "dlock: this dlock was built without the {name} backend: cargo install \
                     dlock-cli --features {name}\n"
                ),
                "{name} by {way}"
            );
        }
    }
}

/// The man pages and completions `dlock generate` writes offer the backends built, and no other.
#[test]
fn generated_pages_and_completions_offer_only_the_backends_built() {
    let out = tempfile::tempdir().unwrap();
    let result = output({
        let mut cmd = dlock();
        cmd.args(["generate", "--out"]).arg(out.path());
        cmd
    });
    assert_eq!(code(&result), 0, "{}", stderr(&result));
    let read = |path: &str| std::fs::read_to_string(out.path().join(path)).unwrap();
    let words = built().join(" ");
    let bash = read("completions/dlock.bash");
    assert!(
        bash.contains(&format!("compgen -W \"{words}\"")),
        "bash offers {words}"
    );
    // Each backend's line in the list of values: in zsh's and fish's completions and the man page.
    for (name, line) in [
        ("redis", "A Redis server (or several, with Redlock)"),
        ("zk", "A ZooKeeper ensemble"),
        ("etcd", "An etcd cluster"),
        ("postgres", "A PostgreSQL database"),
        ("mysql", "A MySQL or MariaDB database"),
    ] {
        let built = built().contains(&name);
        for path in [
            "completions/_dlock",
            "completions/dlock.fish",
            "man/dlock.1",
        ] {
            assert_eq!(read(path).contains(line), built, "{path}: {name}");
        }
    }
}

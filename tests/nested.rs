//! A dlock run by a dlock's command uses its parent's place by default (the backend, the servers,
//! the user, the database, the table prefix), however the parent was given it: a flag, the
//! environment or the configuration file. An option on the nested command still wins. No password
//! reaches the command: one from a password file or the configuration file is found again the same
//! way, one typed into `--url` is not, and the nested dlock says so when refused.

use std::path::Path;
use std::process::Command;

use crate::etcd::server::EtcdServer;
use crate::mysql::server::{MyServer, PASSWORD as MY_PASSWORD};
use crate::postgres::server::{PgServer, PASSWORD};
use crate::redis::sentinel_set::{sentinel_query, SentinelSet, MASTER};
use crate::redis::server::RedisServer;
use crate::support::target::Target;
use crate::support::*;

/// What the command of `dlock run NAME` does with the dlock it finds on its PATH: status, list,
/// a nested run of the same lock, hold and release of another, each followed by `WHAT=STATUS`;
/// then its whole environment.
const SCRIPT: &str = r#"
cd /
dlock status "$0" >/dev/null; echo "status=$?"
dlock list; echo "list=$?"
dlock run -n "$0" -- true; echo "run=$?"
vars=$(dlock hold -n "$0-held"); echo "hold=$?"
eval "$vars"
dlock status "$0-held" >/dev/null; echo "held=$?"
dlock release "$0-held"; echo "release=$?"
echo "--- env"
env
"#;

/// `parent` (a `dlock` with its place already given) runs NAME with `SCRIPT`, or with `script`
/// when given, the dlock under test first on the command's PATH. Returns its output.
fn nested(mut parent: Command, name: &str, script: Option<&str>) -> std::process::Output {
    let bin = Path::new(dlock_bin())
        .parent()
        .expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin.display(),
        crate::support::programs::listed_path().to_string_lossy()
    );
    parent.env("PATH", path).args([
        "run",
        name,
        "--",
        "sh",
        "-c",
        script.unwrap_or(SCRIPT),
        name,
    ]);
    output(parent)
}

/// Checks that every step of `SCRIPT` found the parent's lock and place, and that the command's
/// environment has `url` for DLOCK_URL (none when `None`) and not `secret`.
fn assert_parents_place(out: &std::process::Output, name: &str, url: Option<&str>, secret: &str) {
    let (text, err) = (stdout(out), stderr(out));
    assert_eq!(code(out), 0, "{err}");
    for step in ["status", "list", "run", "hold", "held", "release"] {
        assert!(
            text.lines().any(|l| l == format!("{step}=0")),
            "{step}: {text}{err}"
        );
    }
    assert!(
        text.lines().any(|l| l.split('\t').next() == Some(name)),
        "the nested list shows {name}: {text}"
    );
    let (_, env) = text
        .split_once("--- env\n")
        .expect("the command's environment");
    assert!(
        !env.contains(secret),
        "a password in the command's env: {env}"
    );
    let url_line = env.lines().find(|l| l.starts_with("DLOCK_URL="));
    assert_eq!(
        url_line,
        url.map(|u| format!("DLOCK_URL={u}")).as_deref(),
        "{env}"
    );
}

#[test]
fn file_from_a_flag_the_environment_or_the_configuration_file() {
    let scratch = LockDir::new();
    let locks = scratch.file("locks");
    std::fs::create_dir(&locks).unwrap();
    let shown = locks.display().to_string();

    // A relative --url, passed on as the absolute directory (the command changes directory).
    let mut flag = dlock();
    flag.current_dir(scratch.path()).args(["-u", "locks"]);
    let out = nested(flag, "nested-file-flag", None);
    assert_parents_place(&out, "nested-file-flag", Some(&shown), "\0");

    let mut env = dlock();
    env.env("DLOCK_URL", &locks);
    let out = nested(env, "nested-file-env", None);
    assert_parents_place(&out, "nested-file-env", Some(&shown), "\0");

    let config = scratch.file("config");
    std::fs::write(&config, format!("url = {shown}\n")).unwrap();
    let mut from_config = dlock();
    from_config.env("DLOCK_CONFIG", &config);
    let out = nested(from_config, "nested-file-config", None);
    assert_parents_place(&out, "nested-file-config", None, "\0");
}

#[test]
fn a_nested_option_still_wins() {
    let scratch = LockDir::new();
    let (parent, other) = (scratch.file("parent"), scratch.file("other"));
    std::fs::create_dir(&parent).unwrap();
    std::fs::create_dir(&other).unwrap();
    let script = format!(
        "dlock -u '{}' status \"$0\"; echo \"other=$?\"; dlock -b etcd -u etcd://127.0.0.1:1 \
         --connect-timeout 200ms status \"$0\"; echo \"etcd=$?\"",
        other.display()
    );
    let mut cmd = dlock();
    cmd.arg("-u").arg(&parent);
    let out = nested(cmd, "nested-wins", Some(&script));
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        text.contains(&format!("free ({}/nested-wins.lock)", other.display())),
        "{text}"
    );
    assert!(text.contains("other=1\n"), "{text}");
    assert!(text.contains("etcd=69\n"), "{text}");
    assert!(stderr(&out).contains("127.0.0.1:1"), "{}", stderr(&out));
}

#[test]
fn redis_with_a_database_number_from_a_flag_the_environment_or_the_configuration_file() {
    let scratch = LockDir::new();
    let server = RedisServer::start_with(&["--requirepass", "nested-pw"]);
    let password = scratch.file("password");
    write_secret(&password, "nested-pw\n");
    let url = format!("redis://127.0.0.1:{}/3", server.port());

    let mut flag = dlock();
    flag.args(["-b", "redis", "-u", &url, "--password-file"])
        .arg(&password);
    let out = nested(flag, "nested-redis-flag", None);
    assert_parents_place(&out, "nested-redis-flag", Some(&url), "nested-pw");

    let mut env = dlock();
    env.env("DLOCK_BACKEND", "redis")
        .env("DLOCK_URL", &url)
        .env("DLOCK_PASSWORD_FILE", &password);
    let out = nested(env, "nested-redis-env", None);
    assert_parents_place(&out, "nested-redis-env", Some(&url), "nested-pw");

    // A password in the configuration file's url: read there again.
    let config = scratch.file("config");
    let with_password = format!("redis://:nested-pw@127.0.0.1:{}/3", server.port());
    std::fs::write(&config, format!("backend = redis\nurl = {with_password}\n")).unwrap();
    let mut from_config = dlock();
    from_config.env("DLOCK_CONFIG", &config);
    let out = nested(from_config, "nested-redis-config", None);
    assert_parents_place(&out, "nested-redis-config", None, "nested-pw");

    // The database is the parent's: database 0, named on the nested command, has no such lock.
    let script = format!(
        "dlock -u redis://127.0.0.1:{}/0 status \"$0\"; echo \"db0=$?\"",
        server.port()
    );
    let mut cmd = dlock();
    cmd.args(["-b", "redis", "-u", &url, "--password-file"])
        .arg(&password);
    let out = nested(cmd, "nested-redis-db", Some(&script));
    assert!(stdout(&out).contains("db0=1\n"), "{}", stdout(&out));
}

#[test]
fn a_password_typed_into_the_url_is_not_passed_on_and_the_refusal_says_so() {
    let server = RedisServer::start_with(&["--requirepass", "typed-pw"]);
    let url = format!("redis://:typed-pw@127.0.0.1:{}/2", server.port());
    let script = "dlock status \"$0\"; echo \"status=$?\"; echo \"--- env\"; env";
    let mut cmd = dlock();
    cmd.args(["-b", "redis", "-u", &url]);
    let out = nested(cmd, "nested-typed", Some(script));
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(text.contains("status=69\n"), "{text}{err}");
    let (_, env) = text.split_once("--- env\n").unwrap();
    assert!(!env.contains("typed-pw"), "{env}");
    assert!(
        env.contains(&format!(
            "DLOCK_URL=redis://127.0.0.1:{}/2\n",
            server.port()
        )),
        "{env}"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].ends_with(
            "(the parent dlock's password was given in --url and is not passed on: use \
             --password-file)"
        ),
        "{err}"
    );
    assert!(
        lines[0].contains(&format!("127.0.0.1:{}", server.port())),
        "{err}"
    );
}

#[test]
fn postgres_with_a_user_and_a_table_prefix() {
    let scratch = LockDir::new();
    let password = scratch.file("password");
    write_secret(&password, &format!("{PASSWORD}\n"));
    let typed = PgServer::shared_url("t_nested_");
    let url = typed.replace(&format!("postgres:{PASSWORD}@"), "postgres@");
    assert_ne!(url, typed);

    let mut flag = dlock();
    flag.args(["-b", "postgres", "-u", &url, "--password-file"])
        .arg(&password);
    let out = nested(flag, "nested-pg", None);
    assert_parents_place(&out, "nested-pg", Some(&url), PASSWORD);

    // Another prefix, named on the nested command, has no such lock.
    let other = url.replace("prefix=t_nested_", "prefix=t_nested_other_");
    let script = format!("dlock -u '{other}' status \"$0\"; echo \"other=$?\"");
    let mut cmd = dlock();
    cmd.args(["-b", "postgres", "-u", &url, "--password-file"])
        .arg(&password);
    let out = nested(cmd, "nested-pg-prefix", Some(&script));
    assert!(
        stdout(&out).contains("other=1\n"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn etcd_endpoints_from_a_flag_the_environment_or_the_configuration_file() {
    let scratch = LockDir::new();
    let url = EtcdServer::shared().url();
    let mut flag = dlock();
    flag.args(["-b", "etcd", "-u", &url]);
    let out = nested(flag, "nested-etcd-flag", None);
    assert_parents_place(&out, "nested-etcd-flag", Some(&url), "\0");

    let mut env = dlock();
    env.env("DLOCK_BACKEND", "etcd").env("DLOCK_URL", &url);
    let out = nested(env, "nested-etcd-env", None);
    assert_parents_place(&out, "nested-etcd-env", Some(&url), "\0");

    let config = scratch.file("config");
    std::fs::write(&config, format!("backend = etcd\nurl = {url}\n")).unwrap();
    let mut from_config = dlock();
    from_config.env("DLOCK_CONFIG", &config);
    let out = nested(from_config, "nested-etcd-config", None);
    assert_parents_place(&out, "nested-etcd-config", None, "\0");
}

/// ZooKeeper takes a user only with its password: the user and chroot passed on, the password
/// found again in the password file; typed into --url, the nested dlock's refusal says so.
#[test]
fn zk_with_a_user_and_a_chroot() {
    let scratch = LockDir::new();
    let password = scratch.file("password");
    write_secret(&password, "zk-nested-pw\n");
    let target = Target::suite_zk();
    let plain = target.urls()[0].to_owned();
    let url = plain.replacen("zk://", "zk://app@", 1);
    let typed = plain.replacen("zk://", "zk://app:zk-nested-pw@", 1);

    let mut flag = dlock();
    flag.args(["-b", "zk", "-u", &url, "--password-file"])
        .arg(&password);
    let out = nested(flag, "nested-zk", None);
    assert_parents_place(&out, "nested-zk", Some(&url), "zk-nested-pw");

    let script = "dlock status \"$0\"; echo \"status=$?\"; echo \"--- env\"; env";
    let mut cmd = dlock();
    cmd.args(["-b", "zk", "-u", &typed]);
    let out = nested(cmd, "nested-zk-typed", Some(script));
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(code(&out), 0, "{err}");
    assert!(text.contains("status=64\n"), "{text}{err}");
    assert!(!text.contains("zk-nested-pw"), "{text}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.trim_end().ends_with(
            "(the parent dlock's password was given in --url and is not passed on: use \
             --password-file)"
        ),
        "{err}"
    );
}

#[test]
fn postgres_from_the_environment_or_the_configuration_file() {
    let scratch = LockDir::new();
    let password = scratch.file("password");
    write_secret(&password, &format!("{PASSWORD}\n"));
    let typed = PgServer::shared_url("t_nested_env_");
    let url = typed.replace(&format!("postgres:{PASSWORD}@"), "postgres@");

    let mut env = dlock();
    env.env("DLOCK_BACKEND", "postgres")
        .env("DLOCK_URL", &url)
        .env("DLOCK_PASSWORD_FILE", &password);
    let out = nested(env, "nested-pg-env", None);
    assert_parents_place(&out, "nested-pg-env", Some(&url), PASSWORD);

    let config = scratch.file("config");
    std::fs::write(
        &config,
        format!(
            "backend = postgres\nurl = {url}\npassword-file = {}\n",
            password.display()
        ),
    )
    .unwrap();
    let mut from_config = dlock();
    from_config.env("DLOCK_CONFIG", &config);
    let out = nested(from_config, "nested-pg-config", None);
    assert_parents_place(&out, "nested-pg-config", None, PASSWORD);
}

/// Several servers (Redlock) pass on as one DLOCK_URL, which the nested dlock splits again; a
/// Sentinel URL with its master's name and database passes on whole.
#[test]
fn redlock_servers_and_a_sentinel_master_with_its_database() {
    for (target, name) in [
        (Target::suite_redlock(), "nested-redlock"),
        (Target::suite_sentinel(), "nested-sentinel"),
    ] {
        let url = target.urls().join(" ");
        let mut flag = dlock();
        flag.args(&target.args);
        let out = nested(flag, name, None);
        assert_parents_place(&out, name, Some(&url), "\0");
    }
}

/// Where the parent's place is gone, the nested dlock says so, naming it, and never takes a
/// lock anywhere else.
#[test]
fn a_nested_dlock_that_cannot_use_its_parents_place_says_so() {
    let scratch = LockDir::new();
    let locks = scratch.file("locks");
    std::fs::create_dir(&locks).unwrap();
    let script = "mv \"$DLOCK_URL\" \"$DLOCK_URL.moved\"; dlock run -n \"$0\" -- true; \
                  echo \"run=$?\"; dlock status other; echo \"status=$?\"";
    let mut cmd = dlock();
    cmd.arg("-u").arg(&locks);
    let out = nested(cmd, "nested-gone", Some(script));
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(
        text.contains("run=69\n") && text.contains("status=69\n"),
        "{text}{err}"
    );
    let missing = format!("lock directory {} does not exist", locks.display());
    assert_eq!(err.matches(&missing).count(), 2, "{err}");
}

/// The parent's --url beat its configuration file's url; the nested dlock, reading the same file,
/// keeps to the parent's (DLOCK_URL beats the file), and its own --url beats both.
#[test]
fn the_configuration_file_does_not_override_the_parents_place() {
    let scratch = LockDir::new();
    let (given, configured) = (scratch.file("given"), scratch.file("configured"));
    std::fs::create_dir(&given).unwrap();
    std::fs::create_dir(&configured).unwrap();
    let config = scratch.file("config");
    std::fs::write(&config, format!("url = {}\n", configured.display())).unwrap();
    let mut cmd = dlock();
    cmd.env("DLOCK_CONFIG", &config).arg("-u").arg(&given);
    let out = nested(cmd, "nested-over-config", None);
    assert_parents_place(
        &out,
        "nested-over-config",
        Some(&given.display().to_string()),
        "\0",
    );
    assert_eq!(std::fs::read_dir(&configured).unwrap().count(), 0);
}

#[test]
fn mysql_with_a_user_a_table_prefix_and_a_password_file() {
    let scratch = LockDir::new();
    let password = scratch.file("password");
    write_secret(&password, &format!("{MY_PASSWORD}\n"));
    let typed = MyServer::shared_url("t_nested_");
    let url = typed.replace(&format!("root:{MY_PASSWORD}@"), "root@");
    assert_ne!(url, typed);
    let mut flag = dlock();
    flag.args(["-b", "mysql", "-u", &url, "--password-file"])
        .arg(&password);
    let out = nested(flag, "nested-mysql", None);
    assert_parents_place(&out, "nested-mysql", Some(&url), MY_PASSWORD);
}

/// Sentinels with a password of their own, the data nodes' too: a parent given it as
/// `?sentinel_password=` and by `--password-file` passes on the file but not the URL's password,
/// and the nested dlock reaches the sentinels with the file's.
#[test]
fn redis_behind_sentinels_with_a_password_from_the_password_file() {
    let pw = "sentinel-pw";
    // Sentinels slow to call a master down: no failover while the passwords change.
    let set = SentinelSet::start_watching(&[], std::time::Duration::from_secs(60));
    for port in set.sentinel_ports() {
        sentinel_query(port, &["SENTINEL", "SET", MASTER, "auth-pass", pw])
            .expect("SENTINEL SET auth-pass");
    }
    for node in &set.nodes {
        let mut conn = node.connection();
        for (key, value) in [("masterauth", pw), ("requirepass", pw)] {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg(key)
                .arg(value)
                .query::<()>(&mut conn)
                .expect("CONFIG SET");
        }
    }
    for port in set.sentinel_ports() {
        let password = format!(">{pw}");
        sentinel_query(port, &["ACL", "SETUSER", "default", "resetpass", &password])
            .expect("a password on the sentinel");
    }
    let scratch = LockDir::new();
    let password = scratch.file("password");
    write_secret(&password, &format!("{pw}\n"));
    let url = format!("{}?sentinel_password={pw}", set.url());
    let mut cmd = dlock();
    cmd.args(["-b", "redis", "-u", &url, "--password-file"])
        .arg(&password);
    let out = nested(cmd, "nested-sentinel", None);
    assert_parents_place(&out, "nested-sentinel", Some(&set.url()), pw);
}

//! The files dlock takes settings and a password from, and where the password goes: a
//! configuration or password file another user could have written is refused, a password file
//! is read only if it is a small regular file, a refused password names the file it came from,
//! and the password lands in the URL's user information whatever `@` its other parts hold.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::mysql::server::{MyServer, DATABASE, PASSWORD as MY_PASSWORD};
use crate::postgres::server::{PgServer, PASSWORD as PG_PASSWORD};
use crate::redis::server::RedisServer;
use crate::support::*;

const REDIS_PASSWORD: &str = "s3cr3t-pw";

/// A Redis server that wants `REDIS_PASSWORD`, and its URL without it.
fn guarded_redis() -> (RedisServer, String) {
    let server = RedisServer::start_with(&["--requirepass", REDIS_PASSWORD]);
    let url = format!("redis://127.0.0.1:{}", server.port());
    (server, url)
}

/// `text` in `dir/name`, mode `mode`.
fn file_with(dir: &LockDir, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = dir.file(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn with_password_file(url: &str, backend: &str, password: &Path, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["-b", backend, "-u", url, "--password-file"])
        .arg(password)
        .args(args);
    cmd
}

/// The one line of a refusal, with the status; fails unless it names `says`.
fn refused(cmd: Command, status: i32, says: &str) -> String {
    let out = output_within(cmd, Duration::from_secs(20));
    let err = stderr(&out);
    assert_eq!(code(&out), status, "{err}");
    assert!(err.contains(says), "expected {says:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

#[test]
fn a_configuration_file_another_user_owns_or_may_write_is_refused() {
    let scratch = LockDir::new();
    let locks = scratch.file("locks");
    std::fs::create_dir(&locks).unwrap();
    let text = format!("url = {}\n", locks.display());
    for (mode, owner, says) in [
        (0o666, None, "other users may write to it (mode 666)"),
        (0o620, None, "other users may write to it (mode 620)"),
        (
            0o644,
            Some(4242),
            "it belongs to uid 4242, not to you or root",
        ),
    ] {
        let config = file_with(&scratch, "config", &text, mode);
        std::os::unix::fs::chown(&config, owner, owner).unwrap();
        let mut cmd = dlock();
        cmd.env("DLOCK_CONFIG", &config)
            .args(["run", "x", "--", "true"]);
        let err = refused(cmd, 64, says);
        assert!(
            err.starts_with(&format!(
                "dlock: refusing the configuration file {}: ",
                config.display()
            )),
            "{err}"
        );
        std::fs::remove_file(&config).unwrap();
    }
    // The same file, ours and written by us alone, is read.
    let config = file_with(&scratch, "config", &text, 0o644);
    let mut cmd = dlock();
    cmd.env("DLOCK_CONFIG", &config)
        .args(["run", "x", "--", "true"]);
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(locks.join("x.lock").exists());
}

#[test]
fn a_password_file_another_user_could_write_or_everyone_may_read_is_refused() {
    let scratch = LockDir::new();
    let (_server, url) = guarded_redis();
    for (mode, owner, says) in [
        (
            0o644,
            None,
            "every user may read it (mode 644); chmod o-r it",
        ),
        (0o604, None, "every user may read it (mode 604)"),
        (
            0o660,
            Some(4242),
            "it belongs to uid 4242, not to you or root",
        ),
        (
            0o620,
            None,
            "other users may write to it (mode 620); chmod go-w it",
        ),
        (0o602, None, "other users may write to it (mode 602)"),
    ] {
        let password = file_with(&scratch, "password", REDIS_PASSWORD, mode);
        std::os::unix::fs::chown(&password, owner, owner).unwrap();
        let cmd = with_password_file(&url, "redis", &password, &["status", "x"]);
        let err = refused(cmd, 64, says);
        assert!(
            err.starts_with(&format!(
                "dlock: refusing the password file {}: ",
                password.display()
            )),
            "{err}"
        );
        std::fs::remove_file(&password).unwrap();
    }
    // Readable by its group (a service's group, say) is fine.
    let password = file_with(&scratch, "password", REDIS_PASSWORD, 0o640);
    let out = output(with_password_file(
        &url,
        "redis",
        &password,
        &["status", "x"],
    ));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
}

#[test]
fn a_password_file_that_is_no_small_regular_file_is_refused_at_once() {
    let scratch = LockDir::new();
    let fifo = scratch.file("fifo");
    let made = program("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o600)).unwrap();
    let big = file_with(&scratch, "big", &"x".repeat(5000), 0o600);
    // No server listens: each is refused before dlock tries to connect, and at once (a FIFO
    // without a writer would block a reader forever, past --connect-timeout and -n).
    let url = "redis://127.0.0.1:1";
    for path in [fifo.as_path(), Path::new("/dev/zero"), big.as_path()] {
        let cmd = with_password_file(
            url,
            "redis",
            path,
            &["--connect-timeout", "1s", "run", "-n", "x", "--", "true"],
        );
        refused(
            cmd,
            64,
            &format!(
                "the password file {} is not a regular file of at most 4 KiB",
                path.display()
            ),
        );
    }
}

#[test]
fn white_space_after_the_password_is_not_part_of_it() {
    let scratch = LockDir::new();
    let (_server, url) = guarded_redis();
    let password = file_with(
        &scratch,
        "password",
        &format!("{REDIS_PASSWORD} \t\r\n"),
        0o600,
    );
    let out = output(with_password_file(
        &url,
        "redis",
        &password,
        &["run", "x", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn a_wrong_password_from_a_file_names_the_file() {
    let scratch = LockDir::new();
    let password = file_with(&scratch, "password", "wrong-SECRET\n", 0o600);
    let says = format!(
        "check the user in the URL and the password in the password file {}",
        password.display()
    );
    let (_redis, url) = guarded_redis();
    let err = refused(
        with_password_file(&url, "redis", &password, &["status", "x"]),
        69,
        &says,
    );
    assert!(!err.contains("SECRET"), "{err}");

    let port = PgServer::use_shared().port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?prefix=t_wrongpw_");
    let err = refused(
        with_password_file(&url, "postgres", &password, &["run", "x", "--", "true"]),
        69,
        &says,
    );
    assert!(!err.contains("SECRET"), "{err}");

    let port = MyServer::shared().lock().unwrap().port();
    let url = format!("mysql://root@127.0.0.1:{port}/{DATABASE}?prefix=t_wrongpw_");
    let err = refused(
        with_password_file(&url, "mysql", &password, &["run", "x", "--", "true"]),
        69,
        &says,
    );
    assert!(!err.contains("SECRET"), "{err}");
}

#[test]
fn a_relative_password_file_in_the_configuration_is_beside_it() {
    let scratch = LockDir::new();
    let (_server, url) = guarded_redis();
    let etc = scratch.file("etc");
    let elsewhere = scratch.file("elsewhere");
    std::fs::create_dir(&etc).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(etc.join("password"), REDIS_PASSWORD).unwrap();
    std::fs::set_permissions(etc.join("password"), std::fs::Permissions::from_mode(0o600)).unwrap();
    // A file of the same name where dlock runs, which must not be the one read.
    std::fs::write(elsewhere.join("password"), "wrong").unwrap();
    std::fs::set_permissions(
        elsewhere.join("password"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let config = etc.join("config");
    std::fs::write(
        &config,
        format!("backend = redis\nurl = {url}\npassword-file = password\n"),
    )
    .unwrap();
    let mut cmd = dlock();
    cmd.env("DLOCK_CONFIG", &config)
        .current_dir(&elsewhere)
        .args(["run", "x", "--", "true"]);
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// PostgreSQL gets the password at authentication, not in the startup packet's
/// `application_name`, when the query holds an `@`.
#[test]
fn postgres_the_password_from_a_file_goes_to_authentication_not_into_the_query() {
    let scratch = LockDir::new();
    let password = file_with(&scratch, "password", PG_PASSWORD, 0o600);
    let port = PgServer::use_shared().port();
    let url = format!(
        "postgres://postgres@/postgres?host=127.0.0.1&port={port}&prefix=t_pwquery_&application_name=pw@query"
    );
    let ready = scratch.file("ready");
    let mut holder = with_password_file(&url, "postgres", &password, &["run", "x", "--"]);
    holder
        .args(["sh", "-c", ": > \"$0\"; read line; exit 0"])
        .arg(&ready)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().expect("start dlock");
    let stdin = holder.stdin.take();
    wait_until(
        "the lock is held or dlock ended",
        Duration::from_secs(30),
        || ready.exists() || matches!(holder.try_wait(), Ok(Some(_))),
    );
    let names = PgServer::use_shared().psql("SELECT application_name FROM pg_stat_activity");
    drop(stdin);
    let out = holder.wait_with_output().expect("dlock ends");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(names.lines().any(|n| n == "pw@query"), "{names}");
    assert!(!names.contains(PG_PASSWORD), "{names}");
}

/// MySQL gets the password at authentication when another part of the URL (here the database's
/// name) holds an `@` after the port.
#[test]
fn mysql_the_password_from_a_file_goes_to_authentication_when_the_url_has_another_at() {
    let scratch = LockDir::new();
    let password = file_with(&scratch, "password", MY_PASSWORD, 0o600);
    let server = MyServer::shared().lock().unwrap();
    server.sql("CREATE DATABASE IF NOT EXISTS `pw@db`");
    let port = server.port();
    drop(server);
    let url = format!("mysql://root@127.0.0.1:{port}/pw@db?prefix=t_pwat_");
    let out = output(with_password_file(
        &url,
        "mysql",
        &password,
        &["run", "x", "--", "true"],
    ));
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(!err.contains(MY_PASSWORD), "{err}");
}

/// ZooKeeper's and etcd's parsers take everything up to the last `@` for credentials: a password
/// from a file is not put into a URL with an `@` after its hosts, which is refused instead.
#[test]
fn zk_and_etcd_urls_with_an_at_after_the_hosts_take_no_password_from_a_file() {
    let scratch = LockDir::new();
    let password = file_with(&scratch, "password", "file-SECRET", 0o600);
    for (backend, url) in [
        ("zk", "zk://app@127.0.0.1:1/ch@x"),
        ("etcd", "etcd://127.0.0.1:1/@x"),
    ] {
        let err = refused(
            with_password_file(url, backend, &password, &["status", "x"]),
            64,
            "an `@` after the hosts would be read as the end of the credentials",
        );
        assert!(!err.contains("SECRET"), "{err}");
    }
}

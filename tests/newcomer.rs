//! What a newcomer meets first, from the README alone: flock's habits answered with the line to
//! type, URLs shown with their user and without their password, a name written as a path, a
//! password the server wants, and help that shows an example and what each word is.

use crate::support::*;

/// One line on stderr, `dlock: ...`, exit 64, saying `needle`.
fn refused_saying(out: &std::process::Output, needle: &str, what: &str) {
    let err = stderr(out);
    assert_eq!(code(out), 64, "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    assert!(err.starts_with("dlock: "), "{what}: {err}");
    assert!(err.contains(needle), "{what}: {err:?} lacks {needle:?}");
}

#[test]
fn flock_s_order_gets_the_exact_line_to_type() {
    let dir = LockDir::new();
    for (args, want) in [
        (&["nightly", "true"][..], "say: dlock run nightly -- true"),
        (
            &["-n", "nightly", "echo", "a b"][..],
            "say: dlock run -n nightly -- echo 'a b'",
        ),
        (
            &["run", "-w", "5", "nightly", "echo", "hi"][..],
            "say: dlock run -w 5 nightly -- echo hi",
        ),
        (
            &["run", "-n", "-o", "nightly", "make", "-j4"][..],
            "say: dlock run -n -o nightly -- make -j4",
        ),
    ] {
        let mut cmd = dlock();
        cmd.args(args);
        refused_saying(&output(cmd), want, &format!("{args:?}"));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_url_shows_its_user_and_hides_only_the_password() {
    let (_held, port) = refusing_port();
    for (url, shown) in [
        (
            format!("postgres://app:SECRET@127.0.0.1:{port}/db"),
            format!("postgres://app:***@127.0.0.1:{port}/db"),
        ),
        (
            format!("postgres://app@127.0.0.1:{port}/db"),
            format!("postgres://app@127.0.0.1:{port}/db"),
        ),
        (
            format!("mysql://ops:SECRET@127.0.0.1:{port}/db"),
            format!("mysql://ops:***@127.0.0.1:{port}/db"),
        ),
    ] {
        let mut cmd = dlock();
        cmd.args([
            "-u",
            &url,
            "--connect-timeout",
            "2s",
            "run",
            "x",
            "--",
            "true",
        ]);
        let out = output(cmd);
        let err = stderr(&out);
        assert_eq!(code(&out), 69, "{err}");
        assert!(err.contains(&shown), "{err:?} lacks {shown:?}");
        assert!(!err.contains("SECRET"), "{err}");
    }
}

#[test]
fn a_name_written_as_a_path_is_said_once_to_be_a_lock_name() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["run", "/var/lock/x.lock", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("\"/var/lock/x.lock\" is a dlock lock name, not the file flock(1) locks"),
        "{err}"
    );
    // Quiet, a plain name, and --tree (whose names are paths) say nothing.
    for args in [
        &["-q", "run", "/var/lock/x.lock", "--", "true"][..],
        &["run", "x.lock", "--", "true"][..],
        &["run", "--tree", "/projects/site", "--", "true"][..],
    ] {
        let out = output(dir.dlock(args));
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}

#[test]
fn help_shows_an_example_each_name_and_run_s_command_as_required() {
    let help = |args: &[&str]| {
        let mut cmd = dlock();
        cmd.args(args);
        let out = output(cmd);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let brief = help(&["-h"]);
    assert!(
        brief.contains("Example: dlock run -n nightly -- "),
        "{brief}"
    );
    for sub in ["status", "release"] {
        let text = help(&[sub, "-h"]);
        let described = text
            .lines()
            .find(|l| l.trim_start().starts_with("<NAME>"))
            .map(|l| l.trim().trim_start_matches("<NAME>").trim().to_owned());
        assert!(described.is_some_and(|d| !d.is_empty()), "{sub}: {text}");
    }
    let run = help(&["run", "-h"]);
    assert!(
        run.contains("Usage: dlock run [OPTIONS] <NAME>... -- <COMMAND>...\n"),
        "{run}"
    );
    assert!(!run.contains("[-- <COMMAND>...]"), "{run}");
}

/// A URL with a user and no password, where the server wants one: the line says a password is
/// needed and how to give one (not that the server cannot be reached, nor to check a password
/// that was never given).
#[test]
fn a_url_without_the_password_the_server_wants_says_how_to_give_one() {
    let port = crate::postgres::server::PgServer::use_shared().port();
    let postgres = format!("postgres://postgres@127.0.0.1:{port}/postgres?prefix=t_nopw_");
    let server = crate::redis::server::RedisServer::start();
    let mut conn = server.connection();
    redis::cmd("ACL")
        .arg(&["SETUSER", "app", "on", ">app-secret", "~*", "&*", "+@all"])
        .query::<()>(&mut conn)
        .expect("ACL SETUSER app");
    redis::cmd("ACL")
        .arg(&["SETUSER", "default", "off"])
        .query::<()>(&mut conn)
        .expect("ACL SETUSER default off");
    let redis = format!("redis://app@127.0.0.1:{}", server.port());
    for url in [postgres, redis] {
        let mut cmd = dlock();
        cmd.args([
            "-u",
            &url,
            "--connect-timeout",
            "5s",
            "run",
            "x",
            "--",
            "true",
        ]);
        let out = output(cmd);
        let err = stderr(&out);
        assert_eq!(code(&out), 69, "{url}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("needs a password"), "{url}: {err}");
        assert!(err.contains("--password-file"), "{url}: {err}");
        for wrong in [
            "cannot reach",
            "invalid configuration",
            "check the user and password",
        ] {
            assert!(!err.contains(wrong), "{url}: {err}");
        }
    }
}

/// bash runs a script's last command in its own place: `dlock hold x; dlock release x` under
/// `bash -c` has the release be the very process that holds. It releases (0), says nothing of
/// `--force`, and the lock is free after it.
#[test]
fn a_release_the_shell_runs_in_its_own_place_releases_its_hold() {
    let dir = LockDir::new();
    let url = dir.path().to_str().expect("a UTF-8 path");
    let words = |args: &str| format!("'{}' -u '{url}' {args}", dlock_bin());
    let script = format!("{}; {}", words("hold -n exec-x"), words("release exec-x"));
    let out = output({
        let mut cmd = without_callers_dlock_settings("bash");
        cmd.args(["-c", &script]).stdin(std::process::Stdio::null());
        cmd
    });
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(!err.contains("--force"), "{err}");
    let status = output(dir.dlock(&["status", "exec-x"]));
    assert_eq!(code(&status), 1, "{}", stdout(&status));
    assert!(
        stdout(&status).contains(", released, "),
        "{}",
        stdout(&status)
    );
}

//! The etcd backend over TLS (`etcds://`, the server's certificate checked against the CAs in
//! SSL_CERT_FILE) and with etcd's authentication (a user whose role may touch only dlock's keys),
//! through the real binary on a real etcd.

use std::process::Command;
use std::time::Duration;

use crate::etcd::server::EtcdServer;
use crate::support::tls::make_tls_files;
use crate::support::*;

fn dlock_at(url: &str, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["--backend", "etcd", "--url", url, "--connect-timeout", "5s"])
        .args(args)
        .env_remove("SSL_CERT_DIR");
    cmd
}

#[test]
fn etcds_works_with_the_servers_ca_and_fails_69_with_another() {
    let dir = LockDir::new();
    let files = make_tls_files(&dir);
    let other = LockDir::new();
    let stranger = make_tls_files(&other);
    let server = EtcdServer::start_tls(&files);
    assert!(server.url().starts_with("etcds://"));

    let mut cmd = dlock_at(
        &server.url(),
        &["run", "tls", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    );
    cmd.env("SSL_CERT_FILE", &files.ca);
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).trim().parse::<u64>().is_ok_and(|t| t > 0),
        "{}",
        stdout(&out)
    );

    // A CA that did not sign the server's certificate: refused, one line naming the server.
    let mut cmd = dlock_at(&server.url(), &["run", "tls", "--", "touch", "ran"]);
    cmd.env("SSL_CERT_FILE", &stranger.ca)
        .current_dir(dir.path());
    let out = output(cmd);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("127.0.0.1"), "{}", stderr(&out));
    assert!(!dir.file("ran").exists());
}

/// `etcdctl ARGS` on `server`, which must succeed.
fn etcdctl_ok(server: &EtcdServer, args: &[&str]) {
    let out = server.etcdctl(args).output().expect("etcdctl");
    assert!(out.status.success(), "etcdctl {args:?}: {}", stderr(&out));
}

/// Turns on authentication on `server`: users `root` (root-SECRET), `app` (app-SECRET, read and
/// write on /dlock/ only) and `other` (other-SECRET, no role).
fn enable_auth(server: &EtcdServer) {
    etcdctl_ok(
        server,
        &["user", "add", "root", "--new-user-password=root-SECRET"],
    );
    etcdctl_ok(
        server,
        &["user", "add", "app", "--new-user-password=app-SECRET"],
    );
    etcdctl_ok(server, &["role", "add", "locker"]);
    etcdctl_ok(
        server,
        &[
            "role",
            "grant-permission",
            "locker",
            "--prefix=true",
            "readwrite",
            "/dlock/",
        ],
    );
    etcdctl_ok(server, &["user", "grant-role", "app", "locker"]);
    // A user without the prefix.
    etcdctl_ok(
        server,
        &["user", "add", "other", "--new-user-password=other-SECRET"],
    );
    etcdctl_ok(server, &["auth", "enable"]);
}

#[test]
fn a_user_whose_role_has_only_the_dlock_prefix_can_lock_and_a_wrong_password_is_69() {
    let server = EtcdServer::start();
    enable_auth(&server);

    let url = |password: &str| format!("etcd://app:{password}@127.0.0.1:{}", server.port());
    let out = output(dlock_at(
        &url("app-SECRET"),
        &["run", "auth", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut holder = dlock_at(
        &url("app-SECRET"),
        &["run", "--message", "m", "auth", "--", "sleep", "30"],
    )
    .spawn()
    .unwrap();
    wait_until(
        "the holder to show",
        std::time::Duration::from_secs(30),
        || code(&output(dlock_at(&url("app-SECRET"), &["status", "auth"]))) == 0,
    );
    let out = output(dlock_at(&url("app-SECRET"), &["list"]));
    assert!(stdout(&out).contains("auth\t"), "{}", stdout(&out));
    let out = output(dlock_at(
        &url("app-SECRET"),
        &["release", "--force", "auth"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let _ = holder.kill();
    let _ = holder.wait();

    for args in [
        &["run", "auth", "--", "true"][..],
        &["status", "auth"],
        &["list"],
    ] {
        let out = output(dlock_at(&url("wrong-PASSWORD"), args));
        let err = stderr(&out);
        assert_eq!(code(&out), 69, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            !err.contains("PASSWORD") && !err.contains("SECRET"),
            "{err}"
        );
        assert!(
            err.contains("authentication") || err.contains("password"),
            "{err}"
        );
    }
    // A wrong password from a password file: the line names the file.
    let port = server.port();
    let scratch = LockDir::new();
    let password = scratch.file("password");
    std::fs::write(&password, "wrong-PASSWORD\n").unwrap();
    std::fs::set_permissions(
        &password,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let mut cmd = dlock_at(&format!("etcd://app@127.0.0.1:{port}"), &["status", "auth"]);
    cmd.arg("--password-file").arg(&password);
    let out = output(cmd);
    let err = stderr(&out);
    assert_eq!(code(&out), 69, "{err}");
    assert!(
        err.contains(&format!(
            "check the user in the URL and the password in the password file {}",
            password.display()
        )),
        "{err}"
    );
    assert!(!err.contains("PASSWORD"), "{err}");
    // Each one line with what to give: a user with the prefix, or a user at all.
    for (url, why) in [
        (
            format!("etcd://other:other-SECRET@127.0.0.1:{port}"),
            "permission denied (dlock needs a user with read and write on the prefix /dlock/",
        ),
        (
            format!("etcd://127.0.0.1:{port}"),
            "etcd asks for a user (give etcd://user:password@...)",
        ),
    ] {
        let out = output(dlock_at(&url, &["run", "auth", "--", "true"]));
        let err = stderr(&out);
        assert_eq!(code(&out), 69, "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(why) && !err.contains("SECRET"), "{err}");
    }
    // Nothing left by any of them; the runs of the user with the prefix are kept beside the lock.
    let out = server
        .etcdctl(&[
            "--user",
            "root:root-SECRET",
            "get",
            "--prefix",
            "--keys-only",
            "/dlock/",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let keys: Vec<String> = stdout(&out).split_whitespace().map(str::to_owned).collect();
    assert_eq!(keys, ["/dlock/auth:last-run", "/dlock/auth:last-success"]);
}

/// A token etcd no longer takes (here it forgets one unused for two seconds, `--auth-token-ttl`)
/// is obtained again and the call sent again: a holder renewing every 3s renews on, for as long as
/// its lease lasts and more, rather than losing its lock (exit 79) because every renewal is
/// refused. (With tokens of one second, under a load of eight tests at a time, an authentication
/// and the renewal after it took more than the renewal's second, and by the next try the token
/// was gone again: no renewal got through for the whole lease.)
#[test]
fn a_holder_whose_token_expired_authenticates_again_and_keeps_its_lock() {
    // The cheapest password hashing etcd takes (cost 4, not 10): each renewal here authenticates
    // again, and on a loaded machine hashing at cost 10 took much of a renewal's second.
    let server = EtcdServer::start_with(&["--auth-token-ttl", "2", "--bcrypt-cost", "4"]);
    enable_auth(&server);
    let dir = LockDir::new();
    let url = format!("etcd://app:app-SECRET@127.0.0.1:{}", server.port());
    let script = format!(
        "touch {in_}; while [ ! -e {go} ]; do sleep 0.05; done",
        in_ = dir.file("h.in").display(),
        go = dir.file("h.go").display()
    );
    let errors = std::fs::File::create(dir.file("h.err")).unwrap();
    let mut holder = dlock_at(
        &url,
        &["run", "--ttl", "9s", "expiry", "--", "sh", "-c", &script],
    )
    .stderr(errors)
    .spawn()
    .unwrap();
    wait_for_file(&dir.file("h.in"), Duration::from_secs(60));
    // The holder's own authentications (only it talks to the server now): the first, then one
    // for each renewal that found its token gone. Four renewals span 9s at least: a holder whose
    // renewals were all refused would have lost its lock by then.
    let first = server.calls_served("Authenticate");
    wait_until(
        "four renewals that authenticate again",
        Duration::from_secs(60),
        || server.calls_served("Authenticate") >= first + 4,
    );
    let out = output(dlock_at(&url, &["run", "-n", "expiry", "--", "true"]));
    assert_eq!(
        code(&out),
        75,
        "{}\nthe holder said:\n{}",
        stderr(&out),
        std::fs::read_to_string(dir.file("h.err")).unwrap_or_default()
    );
    std::fs::write(dir.file("h.go"), "").unwrap();
    let status = wait_exit(&mut holder, Duration::from_secs(60));
    let errors = std::fs::read_to_string(dir.file("h.err")).unwrap();
    assert_eq!(status.code(), Some(0), "{errors}");
    assert!(!errors.contains("auth"), "{errors}");
}

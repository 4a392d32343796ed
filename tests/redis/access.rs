//! Reaching Redis: passwords and ACL users, TLS with a test CA, an unreachable server within the
//! connect timeout, malformed or repeated URLs.

use super::*;
use crate::redis::cluster_server::RedisCluster;
use crate::support::tls::make_tls_files;

#[test]
fn passwords_and_acl_users_work_and_a_wrong_password_exits_69() {
    let server = RedisServer::start_with(&[
        "--requirepass",
        "s3cret",
        "--user",
        "alice",
        "on",
        ">p@ss",
        "~*",
        "&*",
        "+@all",
    ]);
    let port = server.port();
    let out = output(dlock_at(&[server.url()], &["run", "p", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // An ACL user, with the URL (and its secret) in the environment rather than on the command line.
    let mut cmd = dlock();
    cmd.args(["--backend", "redis", "status", "p"]);
    cmd.env(
        "DLOCK_URL",
        format!("redis://alice:p%40ss@127.0.0.1:{port}"),
    );
    let out = output(cmd);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("redis://127.0.0.1:{port}")),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("p@ss"), "no secret in the output");

    for url in [
        format!("redis://:wrong@127.0.0.1:{port}"),
        format!("redis://alice:wrong@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let out = output(dlock_at(
            std::slice::from_ref(&url),
            &["run", "p", "--", "true"],
        ));
        assert_eq!(code(&out), 69, "{url}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("authentication failed"),
            "{}",
            stderr(&out)
        );
        assert!(
            !stderr(&out).contains("wrong"),
            "no secret in the message: {}",
            stderr(&out)
        );
    }
}

#[test]
fn tls_works_with_the_servers_ca_and_fails_69_without_it() {
    let dir = LockDir::new();
    let files = make_tls_files(&dir);
    let server = RedisServer::start_tls(&files);
    assert!(server.url().starts_with("rediss://"));
    let mut cmd = dlock_at(
        &[server.url()],
        &["run", "tls", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    );
    cmd.env("SSL_CERT_FILE", &files.ca)
        .env_remove("SSL_CERT_DIR");
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "1");

    let mut cmd = dlock_at(&[server.url()], &["run", "tls", "--", "true"]);
    cmd.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
    let out = output(cmd);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("certificate"), "{}", stderr(&out));
}

#[test]
fn an_unreachable_server_exits_69_within_the_connect_timeout_naming_it() {
    // Nobody listens: refused at once.
    let (_refusing, port) = refusing_port();
    let url = format!("redis://127.0.0.1:{port}");
    let out = output(dlock_at(&[url], &["run", "n", "--", "true"]));
    assert_eq!(code(&out), 69);
    assert_eq!(
        stderr(&out).trim(),
        format!("dlock: cannot reach redis at 127.0.0.1:{port}: connection refused")
    );

    // Something accepts connections but never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let started = Instant::now();
    let out = output(dlock_at(
        &[format!("redis://127.0.0.1:{port}")],
        &["--connect-timeout", "500ms", "run", "n", "--", "true"],
    ));
    let took = started.elapsed();
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "cannot reach redis at 127.0.0.1:{port}: no answer within 500ms"
        )),
        "{}",
        stderr(&out)
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[test]
fn malformed_or_repeated_urls_exit_64() {
    for url in [
        "redis://127.0.0.1:notaport",
        "http://127.0.0.1:6379",
        "127.0.0.1:6379",
        "redis://",
    ] {
        let out = output(dlock_at(&[url.to_owned()], &["run", "n", "--", "true"]));
        assert_eq!(code(&out), 64, "{url}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    let same = "redis://127.0.0.1:6379".to_owned();
    let out = output(dlock_at(&[same.clone(), same], &["run", "n", "--", "true"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

#[test]
fn tls_reaches_every_master_of_a_cluster_with_the_servers_ca_and_fails_69_without_it() {
    let dir = LockDir::new();
    let files = make_tls_files(&dir);
    let cluster = RedisCluster::start_tls(&files);
    let url = cluster.url();
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    // One seed, and names on all three masters: the other two are reached by what the seed says
    // of them, over TLS too.
    let seed = [format!(
        "rediss+cluster://127.0.0.1:{}",
        cluster.nodes[0].port()
    )];
    let names: Vec<String> = (0..3).map(|n| cluster.name_on("tls/", n)).collect();
    let mut args = vec!["run"];
    args.extend(names.iter().map(String::as_str));
    args.extend(["--", "sh", "-c", "echo $DLOCK_TOKEN"]);
    let mut cmd = dlock_at(&seed, &args);
    cmd.env("SSL_CERT_FILE", &files.ca)
        .env_remove("SSL_CERT_DIR");
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "1");
    for (node, name) in names.iter().enumerate() {
        let token = format!("dlock:{{{name}}}:token");
        assert!(
            cluster.nodes[node].keys().contains(&token),
            "{name}'s token on its own master"
        );
    }

    let mut cmd = dlock_at(&seed, &["run", "tls/none", "--", "true"]);
    cmd.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
    let out = output(cmd);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("certificate"), "{}", stderr(&out));
}

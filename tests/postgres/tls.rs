//! The PostgreSQL backend over TLS, through the real binary on a real server with a certificate
//! from a test CA: `sslmode=require` checks the certificate against the trusted CAs
//! (`sslrootcert=` or SSL_CERT_FILE), `verify-full` also the host name; another CA is refused.

use std::process::Command;

use crate::postgres::server::{PgServer, PASSWORD};
use crate::support::tls::make_tls_files;
use crate::support::*;

fn dlock_at(url: &str, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["--backend", "postgres", "--url", url])
        .args(args)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR");
    cmd
}

#[test]
fn sslmode_require_and_verify_full_work_with_the_test_ca_and_another_ca_is_refused_69() {
    let dir = LockDir::new();
    let files = make_tls_files(&dir);
    let other = LockDir::new();
    let stranger = make_tls_files(&other);
    let server = PgServer::start_tls(&files.cert, &files.key);
    let url = |host: &str, query: &str| {
        format!(
            "postgres://postgres:{PASSWORD}@{host}:{}/postgres?{query}",
            server.port()
        )
    };
    let ca = files.ca.display().to_string();
    let run = |url: &str| {
        output(dlock_at(
            url,
            &["run", "tls", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
        ))
    };
    for (host, mode) in [
        ("127.0.0.1", "require"),
        ("127.0.0.1", "verify-full"),
        // `require` checks the CA, not the name.
        ("localhost", "require"),
    ] {
        let out = run(&url(host, &format!("sslmode={mode}&sslrootcert={ca}")));
        assert_eq!(code(&out), 0, "{host} {mode}: {}", stderr(&out));
    }
    // SSL_CERT_FILE when the URL names no root certificate.
    let mut cmd = dlock_at(
        &url("127.0.0.1", "sslmode=verify-full"),
        &["run", "tls", "--", "true"],
    );
    cmd.env("SSL_CERT_FILE", &files.ca);
    let out = output(cmd);
    assert_eq!(code(&out), 0, "SSL_CERT_FILE: {}", stderr(&out));

    let refused = [
        // The certificate is made out to 127.0.0.1, not localhost.
        url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
        // Signed by another CA.
        url(
            "127.0.0.1",
            &format!("sslmode=require&sslrootcert={}", stranger.ca.display()),
        ),
    ];
    for url in refused {
        let out = output(dlock_at(&url, &["run", "tls", "--", "touch", "ran"]));
        let err = stderr(&out);
        assert_eq!(code(&out), 69, "{url}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("certificate"), "{err}");
        assert!(!err.contains(PASSWORD), "{err}");
    }
    assert!(!dir.file("ran").exists());
}

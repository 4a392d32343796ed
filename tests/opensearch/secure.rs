//! dlock on Elasticsearch over HTTPS with Basic authentication. The test node has no security
//! plugin, so a relay of the test's own stands in front of it: it ends TLS with a certificate of a
//! test CA for 127.0.0.1 and refuses a connection whose first request does not carry the user and
//! password it expects (401, as a secured node answers), then passes everything on. So this
//! checks dlock's side (the certificate checked against SSL_CERT_FILE and the host, the
//! credentials sent, a refusal named in one line without the password), not a node's own security.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::support::opensearch_server::OpenSearchServer;
use crate::support::tls::{make_tls_files, TlsFiles};
use crate::support::*;

const USER: &str = "locker";
const PASSWORD: &str = "s3cret:pw";
/// `locker:s3cret:pw` in base64.
const BASIC: &str = "bG9ja2VyOnMzY3JldDpwdw==";

/// Starts the relay on a free port in front of `node`; it serves until the test process ends.
fn relay(node: &OpenSearchServer, files: &TlsFiles) -> u16 {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .expect("the server certificate")
        .map(|c| c.expect("a certificate"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(&files.key).expect("the server key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("the relay's certificate");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the relay");
    let port = listener.local_addr().expect("its address").port();
    let upstream = node.port();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(200) {
            let Ok(conn) = conn else { continue };
            let config = config.clone();
            std::thread::spawn(move || pass_on(conn, config, upstream));
        }
    });
    port
}

/// One connection: TLS ended here, the first request's credentials checked, then bytes both ways.
fn pass_on(conn: TcpStream, config: Arc<rustls::ServerConfig>, upstream: u16) {
    let Ok(server) = rustls::ServerConnection::new(config) else {
        return;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(10)));
    let mut tls = rustls::StreamOwned::new(server, conn);
    let mut head = Vec::new();
    let mut buf = [0u8; 16384];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if std::time::Instant::now() > deadline || head.len() > 65536 {
            return;
        }
        match tls.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    if !text.contains(&format!(
        "authorization: basic {}",
        BASIC.to_ascii_lowercase()
    )) {
        let body = r#"{"error":{"type":"security_exception","reason":"unable to authenticate user"},"status":401}"#;
        let _ = write!(
            tls,
            "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = tls.flush();
        return;
    }
    let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let _ = up.set_read_timeout(Some(Duration::from_millis(10)));
    if up.write_all(&head).is_err() {
        return;
    }
    // Bounded by the connection's life: either side closing ends it.
    loop {
        match tls.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if up.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
        match up.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tls.write_all(&buf[..n]).and_then(|()| tls.flush()).is_err() {
                    return;
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

fn dlock_at(url: &str, ca: &std::path::Path) -> std::process::Command {
    let mut cmd = dlock();
    cmd.args(["--backend", "elasticsearch", "--url", url])
        .env("SSL_CERT_FILE", ca);
    cmd
}

#[test]
fn https_with_basic_auth_works_and_a_wrong_password_or_certificate_is_refused_in_one_line() {
    let node = OpenSearchServer::shared();
    let dir = LockDir::new();
    let files = make_tls_files(&dir);
    let port = relay(node, &files);
    let good = format!("elasticsearchs://{USER}:s3cret%3Apw@127.0.0.1:{port}/secure");
    let run = ["run", "s", "--", "sh", "-c", "echo $DLOCK_TOKEN"];
    let out = output({
        let mut cmd = dlock_at(&good, &files.ca);
        cmd.args(run);
        cmd
    });
    assert_eq!(
        (code(&out), stdout(&out).trim()),
        (0, "1"),
        "{}",
        stderr(&out)
    );

    // The password from a file, as for every backend.
    let password = dir.file("password");
    std::fs::write(&password, format!("{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(
        &password,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let out = output({
        let mut cmd = dlock_at(
            &format!("opensearchs://{USER}@127.0.0.1:{port}/secure"),
            &files.ca,
        );
        cmd.arg("--password-file").arg(&password).args(run);
        cmd
    });
    assert_eq!(
        (code(&out), stdout(&out).trim()),
        (0, "2"),
        "{}",
        stderr(&out)
    );

    // A wrong password: 69, one line, naming the refusal and not the password.
    let out = output({
        let mut cmd = dlock_at(
            &format!("elasticsearchs://{USER}:hunter2@127.0.0.1:{port}/secure"),
            &files.ca,
        );
        cmd.args(run);
        cmd
    });
    let err = stderr(&out);
    assert_eq!(code(&out), 69, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("refused the credentials") && !err.contains("hunter2"),
        "{err}"
    );

    // A certificate no trusted CA signed, and plain HTTP to a TLS port: 69, never a lock.
    let stranger = make_tls_files(&LockDir::new());
    for (url, ca) in [
        (good.clone(), &stranger.ca),
        (good.replace("elasticsearchs", "elasticsearch"), &files.ca),
    ] {
        let out = output({
            let mut cmd = dlock_at(&url, ca);
            cmd.args(["--connect-timeout", "3s"]).args(run);
            cmd
        });
        let err = stderr(&out);
        assert_eq!(code(&out), 69, "{url}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }
}

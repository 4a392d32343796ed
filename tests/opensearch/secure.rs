//! dlock on Elasticsearch over HTTPS with Basic authentication. The test node has no security
//! plugin, so a relay of the test's own stands in front of it: it ends TLS with a certificate of a
//! test CA for 127.0.0.1 and refuses every request, the first of a connection or a later one, that
//! does not carry the user and password it expects (401, as a secured node answers). So this
//! checks dlock's side (the certificate checked against SSL_CERT_FILE and the host, the
//! credentials sent, a refusal named in one line without the password), not a node's own security.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::opensearch::server::OpenSearchServer;
use crate::support::tls::{make_tls_files, TlsFiles};
use crate::support::*;

const USER: &str = "locker";
const PASSWORD: &str = "s3cret:pw";
/// `locker:s3cret:pw` in base64.
const BASIC: &str = "bG9ja2VyOnMzY3JldDpwdw==";

/// Starts the relay on a free port in front of `node`; it serves until the test process ends.
/// `most`: the most requests it checked on one connection.
fn relay(node: &OpenSearchServer, files: &TlsFiles, most: Arc<AtomicUsize>) -> u16 {
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
            let (config, most) = (config.clone(), most.clone());
            std::thread::spawn(move || pass_on(conn, config, upstream, &most));
        }
    });
    port
}

/// The requests of one connection, read as they pass: each head must carry the credentials, and
/// its body (`Content-Length` bytes, as dlock sends) is passed on unread.
#[derive(Default)]
struct Requests {
    /// Bytes read from dlock, not yet passed on.
    pending: Vec<u8>,
    /// Bytes of the current request's body still to pass on.
    body_left: usize,
    /// Requests checked on this connection.
    checked: usize,
}

impl Requests {
    /// Takes `data` from dlock; returns what may go on to the node, or `Err` once a request
    /// lacks the credentials (or its head does not read).
    fn take(&mut self, data: &[u8]) -> Result<Vec<u8>, ()> {
        self.pending.extend_from_slice(data);
        let mut out = Vec::new();
        loop {
            if self.body_left > 0 {
                let n = self.body_left.min(self.pending.len());
                out.extend(self.pending.drain(..n));
                self.body_left -= n;
                if self.body_left > 0 {
                    return Ok(out);
                }
                continue;
            }
            let Some(end) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") else {
                return if self.pending.len() > 65536 {
                    Err(())
                } else {
                    Ok(out)
                };
            };
            let head: Vec<u8> = self.pending.drain(..end + 4).collect();
            let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
            let authorized = text.lines().any(|l| {
                l.trim_end() == format!("authorization: basic {}", BASIC.to_ascii_lowercase())
            });
            if !authorized || text.contains("transfer-encoding") {
                return Err(());
            }
            self.body_left = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(Ok(0), |n| n.trim().parse())
                .map_err(|_| ())?;
            self.checked += 1;
            out.extend(head);
        }
    }
}

/// One connection: TLS ended here, every request's credentials checked (401 and the end of the
/// connection at the first without them, as a secured node answers), then passed on; the most
/// requests checked on one connection so far goes into `most`.
fn pass_on(conn: TcpStream, config: Arc<rustls::ServerConfig>, upstream: u16, most: &AtomicUsize) {
    let Ok(server) = rustls::ServerConnection::new(config) else {
        return;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(10)));
    let mut tls = rustls::StreamOwned::new(server, conn);
    let mut requests = Requests::default();
    let mut buf = [0u8; 16384];
    let mut up: Option<TcpStream> = None;
    // Bounded by the connection's life: either side closing ends it.
    loop {
        match tls.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let Ok(checked) = requests.take(&buf[..n]) else {
                    let body = r#"{"error":{"type":"security_exception","reason":"unable to authenticate user"},"status":401}"#;
                    let _ = write!(
                        tls,
                        "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.flush();
                    return;
                };
                most.fetch_max(requests.checked, Ordering::SeqCst);
                if up.is_none() && !checked.is_empty() {
                    let Ok(stream) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        return;
                    };
                    let _ = stream.set_read_timeout(Some(Duration::from_millis(10)));
                    up = Some(stream);
                }
                if let Some(up) = up.as_mut() {
                    if up.write_all(&checked).is_err() {
                        return;
                    }
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
        let Some(up) = up.as_mut() else { continue };
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
    let most = Arc::new(AtomicUsize::new(0));
    let port = relay(node, &files, most.clone());
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
    // A run sends several requests over one connection: each had the credentials.
    assert!(
        most.load(Ordering::SeqCst) >= 2,
        "the relay checked {} requests on a connection at most",
        most.load(Ordering::SeqCst)
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

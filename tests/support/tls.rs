//! TLS material for the servers the tests start (Redis, PostgreSQL, etcd): a CA of the test's own
//! and a server certificate for 127.0.0.1 it signed, made with the openssl command.

use super::programs::program;
use std::path::PathBuf;

use super::LockDir;

/// A test CA's certificate, and a server certificate and key it signed for 127.0.0.1.
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A CA and a server certificate for 127.0.0.1, made with the openssl command.
pub fn make_tls_files(dir: &LockDir) -> TlsFiles {
    let openssl = |args: &[&str]| {
        let out = program("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("openssl is needed for the TLS test");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=dlock test CA",
            ],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
    );
    std::fs::write(dir.file("san.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.cnf",
    ]);
    TlsFiles {
        cert: dir.file("server.crt"),
        key: dir.file("server.key"),
        ca: dir.file("ca.crt"),
    }
}

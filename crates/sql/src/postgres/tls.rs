//! TLS for `sslmode=require|verify-ca|verify-full`: the server's certificate is always checked
//! against the trusted CAs (the URL's `sslrootcert=` file, else SSL_CERT_FILE or the system's);
//! only `verify-full` also requires it to be made out to the URL's host. (libpq's `require`
//! checks nothing without a root certificate; dlock never talks TLS to a server it cannot
//! verify, since a stranger in the middle could then grant it any lock.)
//!
//! The connector is tokio-postgres-rustls: it speaks the rustls already used for Redis (with ring),
//! so no OpenSSL is linked.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::address::{PgUrl, Tls};

/// The rustls settings for `url` in mode `tls`; `Err`: why not, for the user.
pub fn client_config(url: &PgUrl, tls: Tls) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    match &url.root_cert {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|_| format!("cannot read sslrootcert {path:?}"))?;
            for cert in certs {
                let cert = cert.map_err(|_| format!("cannot read sslrootcert {path:?}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {path:?}: {e}"))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    if roots.is_empty() {
        return Err(
            "TLS: no trusted CA certificate found (give sslrootcert= or SSL_CERT_FILE)".into(),
        );
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let config = match tls {
        Tls::Chain => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyName(webpki)))
            .with_no_client_auth(),
        _ => builder.with_webpki_verifier(webpki).with_no_client_auth(),
    };
    Ok(config)
}

/// Checks the certificate chain as WebPKI does, but accepts a certificate made out to another
/// host name (`sslmode=require` and `verify-ca`).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

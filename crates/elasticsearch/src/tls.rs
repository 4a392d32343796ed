//! HTTPS (`elasticsearchs://`, `opensearchs://`): the node's certificate is checked against the
//! trusted CAs (SSL_CERT_FILE, or the system's) and must be made out to the host the URL names, as
//! curl checks it. dlock never speaks TLS to a node it cannot verify: a stranger in the middle
//! could then grant it any lock.

use std::sync::Arc;

use rustls::RootCertStore;

/// The rustls settings; `Err`: why not, for the user.
pub(super) fn client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err("TLS: no trusted CA certificate found (give SSL_CERT_FILE)".into());
    }
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

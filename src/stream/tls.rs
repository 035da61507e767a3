//! rustls configurations from PEM files: the receiver's server config (optionally
//! requiring client certificates signed by `--stream-tls-client-ca`) and the sender's
//! client config (trusting `--tls-ca`, optionally presenting a client certificate).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::StreamError;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, StreamError> {
    let v: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| StreamError::Invalid(format!("{}: {e}", path.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| StreamError::Invalid(format!("{}: {e}", path.display())))?;
    if v.is_empty() {
        return Err(StreamError::Invalid(format!(
            "{}: no PEM certificate",
            path.display()
        )));
    }
    Ok(v)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, StreamError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| StreamError::Invalid(format!("{}: {e}", path.display())))
}

fn roots(path: &Path) -> Result<rustls::RootCertStore, StreamError> {
    let mut r = rustls::RootCertStore::empty();
    for c in certs(path)? {
        r.add(c)
            .map_err(|e| StreamError::Invalid(format!("{}: {e}", path.display())))?;
    }
    Ok(r)
}

fn tls_err(e: rustls::Error) -> StreamError {
    StreamError::Invalid(format!("TLS configuration: {e}"))
}

/// The receiver's TLS: `client_ca` makes a client certificate mandatory (mutual TLS).
pub fn server_config(
    cert: &Path,
    key_path: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, StreamError> {
    let b = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?;
    let b = match client_ca {
        Some(ca) => {
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(ca)?),
                provider(),
            )
            .build()
            .map_err(|e| StreamError::Invalid(format!("{}: {e}", ca.display())))?;
            b.with_client_cert_verifier(v)
        }
        None => b.with_no_client_auth(),
    };
    let mut c = b
        .with_single_cert(certs(cert)?, key(key_path)?)
        .map_err(tls_err)?;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

/// The sender's TLS: trust `ca`; present `client` (cert, key) for mutual TLS.
pub fn client_config(
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, StreamError> {
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_root_certificates(roots(ca)?);
    let mut c = match client {
        Some((cert, k)) => b
            .with_client_auth_cert(certs(cert)?, key(k)?)
            .map_err(tls_err)?,
        None => b.with_no_client_auth(),
    };
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

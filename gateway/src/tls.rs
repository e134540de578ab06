//! TLS on the listener: the certificate and key from `[server.tls]`, served through a rustls
//! certificate resolver whose key is swapped on SIGHUP. Connections already open keep the
//! session they negotiated; new handshakes get the new certificate, so nothing is dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::listeners::tls::{Acceptor, TlsSettings};
use pingora::protocols::Stream;
use pingora::protocols::l4::stream::Stream as TcpStream;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use pingora::tls::sign::CertifiedKey;
use pingora::tls::{ClientHello, CryptoProvider, ResolvesServerCert};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    #[error("cert_file {0}: {1}")]
    Cert(PathBuf, String),
    #[error("key_file {0}: {1}")]
    Key(PathBuf, String),
    #[error("key_file is not the private key of cert_file's certificate")]
    Mismatch,
    #[error("ca_file {0}: {1}")]
    Ca(PathBuf, String),
}

/// The process's rustls provider (pingora installs ring's; installing twice is a no-op).
fn provider() -> Option<&'static Arc<CryptoProvider>> {
    pingora::tls::install_default_crypto_provider();
    CryptoProvider::get_default()
}

/// Read a PEM certificate chain and private key, and check that they belong together.
pub(crate) fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsFileError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|items| items.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsFileError::Cert(cert.to_owned(), e.to_string()))?;
    if chain.is_empty() {
        return Err(TlsFileError::Cert(
            cert.to_owned(),
            "no PEM certificate in it".into(),
        ));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| TlsFileError::Key(key.to_owned(), e.to_string()))?;
    let provider = provider().ok_or_else(|| {
        TlsFileError::Key(key.to_owned(), "no TLS crypto provider installed".into())
    })?;
    CertifiedKey::from_der(chain, private, provider).map_err(|e| match e {
        pingora::tls::RusTlsError::InconsistentKeys(_) => TlsFileError::Mismatch,
        other => TlsFileError::Key(key.to_owned(), other.to_string()),
    })
}

/// Check that a CA file holds at least one certificate rustls can use as a trust anchor.
pub(crate) fn load_ca_file(path: &Path) -> Result<(), TlsFileError> {
    let mut store = pingora::tls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|items| items.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsFileError::Ca(path.to_owned(), e.to_string()))?;
    let (added, _ignored) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(TlsFileError::Ca(
            path.to_owned(),
            "no usable PEM certificate in it".into(),
        ));
    }
    Ok(())
}

/// The listener's certificate: one key, swapped whole on reload.
#[derive(Debug)]
pub(crate) struct CertStore {
    files: CertFiles,
    current: ArcSwap<CertifiedKey>,
}

/// Where the certificate and its key are read from (`[server.tls]`; `config` checks them
/// when it loads, with this module's loaders, so this module does not read `config`).
#[derive(Debug, Clone)]
pub(crate) struct CertFiles {
    pub(crate) cert_file: PathBuf,
    pub(crate) key_file: PathBuf,
    /// Offer HTTP/2 through ALPN.
    pub(crate) http2: bool,
}

impl CertStore {
    pub(crate) fn open(files: CertFiles) -> Result<Arc<CertStore>, TlsFileError> {
        let key = load_certified_key(&files.cert_file, &files.key_file)?;
        Ok(Arc::new(CertStore {
            files,
            current: ArcSwap::from_pointee(key),
        }))
    }

    /// Read the files again; a pair that does not load keeps the running certificate.
    pub(crate) fn reload(&self) -> Result<(), TlsFileError> {
        let key = load_certified_key(&self.files.cert_file, &self.files.key_file)?;
        self.current.store(Arc::new(key));
        Ok(())
    }

    /// pingora's TLS settings for the listener, resolving through this store.
    fn settings(self: &Arc<Self>) -> pingora::Result<TlsSettings> {
        // No paths: with a resolver set, pingora reads no files.
        let mut settings = TlsSettings::intermediate("", "")?;
        settings.set_cert_resolver(Arc::new(Resolver(Arc::clone(self))));
        if self.files.http2 {
            settings.enable_h2();
        }
        Ok(settings)
    }

    /// The listener's TLS handshake, for the connection limits to do (listener/connections.rs):
    /// done by pingora's listener it would happen before the gateway sees the connection,
    /// outside every limit and with a fixed 60 s deadline.
    pub(crate) fn handshake(self: &Arc<Self>) -> pingora::Result<Handshake> {
        Ok(Handshake(Arc::new(self.settings()?.build())))
    }
}

/// A TLS handshake with the listener's settings and certificate.
#[derive(Clone)]
pub(crate) struct Handshake(Arc<Acceptor>);

impl Handshake {
    /// Handshake on a freshly accepted TCP stream; `None` (logged at debug: a client that
    /// went away or speaks no TLS is routine) when it fails.
    pub(crate) async fn accept(&self, stream: Stream) -> Option<Stream> {
        let tcp = match stream.into_any().downcast::<TcpStream>() {
            Ok(tcp) => tcp,
            Err(_) => {
                tracing::error!("TLS: the listener handed over a stream that is not TCP; closed");
                return None;
            }
        };
        match self.0.tls_handshake(*tcp).await {
            Ok(tls) => Some(Box::new(tls)),
            Err(e) => {
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
        }
    }
}

#[derive(Debug)]
struct Resolver(Arc<CertStore>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current.load_full())
    }
}

/// Reloads the certificate on SIGHUP (next to the policy reload, which has its own handler).
pub(crate) struct CertReloader(pub Arc<CertStore>);

#[async_trait]
impl BackgroundService for CertReloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(mut hangups) = crate::hangup::hangups("the TLS certificate will not reload")
        else {
            return;
        };
        while crate::hangup::next(&mut hangups, &mut shutdown).await {
            let store = Arc::clone(&self.0);
            match tokio::task::spawn_blocking(move || store.reload()).await {
                Ok(Ok(())) => {
                    tracing::info!(cert = %self.0.files.cert_file.display(), "SIGHUP: TLS certificate reloaded")
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "SIGHUP: TLS certificate not reloaded; the running one is kept")
                }
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: TLS certificate reload did not finish")
                }
            }
        }
    }
}

//! Test certificates, generated when a test runs: a CA and leaf certificates for
//! `localhost` it signs, written as PEM files into a temporary folder.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    dir: tempfile::TempDir,
}

/// A leaf certificate and its key, as files.
#[derive(Debug, Clone)]
pub struct LeafFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "poppy test CA");
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("poppy-e2e-tls-")
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        TestCa {
            issuer: Issuer::new(params, key),
            dir,
        }
    }

    /// The CA certificate, for clients.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A certificate for `localhost` and 127.0.0.1 with common name `name`, written to
    /// `<name>.pem` and `<name>.key`.
    pub fn leaf(&self, name: &str) -> LeafFiles {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let files = LeafFiles {
            cert: self.dir.path().join(format!("{name}.pem")),
            key: self.dir.path().join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }

    /// A certificate for `localhost` and 127.0.0.1, in memory: (certificate DER, PKCS#8 key
    /// DER), for a server in the test process.
    pub fn leaf_der(&self, name: &str) -> (Vec<u8>, Vec<u8>) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.der().to_vec(), key.serialize_der())
    }
}

impl Default for TestCa {
    fn default() -> TestCa {
        TestCa::new()
    }
}

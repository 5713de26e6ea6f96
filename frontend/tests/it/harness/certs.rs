//! Test certificates made at test time with rcgen (no key is ever committed): a [`Ca`] that issues
//! server leaves (`localhost` + `127.0.0.1`, wildcards, expired ones) and client certificates, each a
//! [`Pem`] that is written into a test's [`TempDir`].

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls_pki_types::CertificateDer;

use super::TempDir;

/// A certificate (PEM chain, leaf first) and its key, with the leaf's DER to compare against what a
/// peer presented.
#[derive(Clone, Debug)]
pub struct Pem {
    pub cert: String,
    pub key: String,
    pub der: Vec<u8>,
}

impl Pem {
    /// Writes `{stem}.pem` and `{stem}.key` into `dir`; returns (cert path, key path).
    pub fn write(&self, dir: &TempDir, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.0.join(format!("{stem}.pem"));
        let key = dir.0.join(format!("{stem}.key"));
        std::fs::write(&cert, &self.cert).unwrap();
        std::fs::write(&key, &self.key).unwrap();
        (cert, key)
    }

    /// The leaf as a rustls certificate.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        CertificateDer::from(self.der.clone())
    }
}

/// A test certificate authority.
pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pub pem: String,
    pub der: Vec<u8>,
}

impl Ca {
    /// A new self-signed CA named `cn`.
    pub fn new(cn: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            der: cert.der().to_vec(),
            params,
            key,
        }
    }

    /// Writes the CA certificate to `{stem}.pem` in `dir`; its path.
    pub fn write(&self, dir: &TempDir, stem: &str) -> PathBuf {
        let p = dir.0.join(format!("{stem}.pem"));
        std::fs::write(&p, &self.pem).unwrap();
        p
    }

    /// The CA as a rustls trust anchor certificate.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        CertificateDer::from(self.der.clone())
    }

    /// A server leaf for `names` (an IP literal becomes an IP SAN), subject CN `cn`, valid now.
    pub fn leaf(&self, cn: &str, names: &[&str]) -> Pem {
        self.issue(cn, names, false, false)
    }

    /// A server leaf like [`Ca::leaf`] with a key of algorithm `alg` (e.g. `rcgen::PKCS_ED25519`).
    pub fn leaf_with(
        &self,
        cn: &str,
        names: &[&str],
        alg: &'static rcgen::SignatureAlgorithm,
    ) -> Pem {
        self.issue_with(cn, names, false, false, alg)
    }

    /// A server leaf like [`Ca::leaf`] that expired in 2001.
    pub fn expired_leaf(&self, cn: &str, names: &[&str]) -> Pem {
        self.issue(cn, names, false, true)
    }

    /// A client certificate (clientAuth) with subject CN `cn`.
    pub fn client(&self, cn: &str) -> Pem {
        self.issue(cn, &[cn], true, false)
    }

    /// A leaf whose PEM chain has the CA first and the leaf second (the wrong order).
    pub fn wrong_order_chain(&self, cn: &str, names: &[&str]) -> Pem {
        let mut p = self.leaf(cn, names);
        p.cert = format!("{}{}", self.pem, p.cert);
        p
    }

    /// A leaf whose PEM chain is leaf then CA (the right order).
    pub fn chain(&self, cn: &str, names: &[&str]) -> Pem {
        let mut p = self.leaf(cn, names);
        p.cert = format!("{}{}", p.cert, self.pem);
        p
    }

    fn issue(&self, cn: &str, names: &[&str], client: bool, expired: bool) -> Pem {
        self.issue_with(cn, names, client, expired, &rcgen::PKCS_ECDSA_P256_SHA256)
    }

    fn issue_with(
        &self,
        cn: &str,
        names: &[&str],
        client: bool,
        expired: bool,
        alg: &'static rcgen::SignatureAlgorithm,
    ) -> Pem {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*n).try_into().unwrap()),
            })
            .collect();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate_for(alg).unwrap();
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

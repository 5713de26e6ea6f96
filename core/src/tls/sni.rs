//! Certificate choice by SNI (DESIGN.md "TLS"): the exact name (case-insensitive), then a `*.` wildcard
//! covering exactly one label, then the first certificate, which is also the answer when the client
//! sends no SNI. Names are lower-cased into maps when the resolver is built; a lookup lower-cases the SNI
//! into a stack buffer and allocates nothing.

use std::{collections::HashMap, sync::Arc};

use rustls::{
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};

use super::certs::LoadedCert;

/// The longest DNS name (RFC 1035 §2.3.4); a longer SNI matches no name and gets the default.
const MAX_NAME: usize = 253;

/// [`ResolvesServerCert`] over the configured certificates, in `server.tls.certificates` order.
#[derive(Debug)]
pub struct SniResolver {
    /// The certificates; index 0 is the default.
    certs: Vec<Arc<CertifiedKey>>,
    /// Lower-cased exact name → index into `certs` (the first certificate naming it wins).
    exact: HashMap<String, usize>,
    /// Lower-cased suffix after `*.` → index into `certs` (the first certificate naming it wins).
    wildcard: HashMap<String, usize>,
}

impl SniResolver {
    /// A resolver over `certs` (the first is the default).
    pub fn new(certs: &[LoadedCert]) -> Self {
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (i, c) in certs.iter().enumerate() {
            for name in &c.names {
                let name = name.to_ascii_lowercase();
                match name.strip_prefix("*.") {
                    Some(suffix) => wildcard.entry(suffix.to_string()).or_insert(i),
                    None => exact.entry(name).or_insert(i),
                };
            }
        }
        SniResolver {
            certs: certs.iter().map(|c| c.certified.clone()).collect(),
            exact,
            wildcard,
        }
    }

    /// The index of the certificate for `sni` (the client's server name, if it sent one): exact name,
    /// then wildcard, then 0. `None` only when the resolver has no certificate at all.
    pub fn pick(&self, sni: Option<&str>) -> Option<usize> {
        if self.certs.is_empty() {
            return None;
        }
        let Some(sni) = sni else { return Some(0) };
        let mut buf = [0u8; MAX_NAME];
        let Some(lower) = buf.get_mut(..sni.len()) else {
            return Some(0);
        };
        lower.copy_from_slice(sni.as_bytes());
        lower.make_ascii_lowercase();
        let Ok(name) = std::str::from_utf8(lower) else {
            return Some(0);
        };
        if let Some(&i) = self.exact.get(name) {
            return Some(i);
        }
        // `*.example.com` covers `a.example.com`, not `example.com` nor `a.b.example.com`.
        if let Some((label, rest)) = name.split_once('.') {
            if !label.is_empty() && !rest.is_empty() {
                if let Some(&i) = self.wildcard.get(rest) {
                    return Some(i);
                }
            }
        }
        Some(0)
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(hello.server_name())
            .and_then(|i| self.certs.get(i).cloned())
    }
}

//! [`Cidr`]: an IP network in CIDR notation, as `server.trusted_proxies` lists them (DESIGN.md
//! "Configuration (TOML)"), and the containment test that decides whether a peer's X-Forwarded-For and
//! -Proto are kept (DESIGN.md "HTTP/1.1 rules (RFC 9110, RFC 9112)").

use std::net::IpAddr;

/// An IP network in CIDR notation (`10.0.0.0/8`, `::1/128`; a bare address means a single host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `addr/prefix` or a bare address.
    ///
    /// # Errors
    /// A reason when the address or prefix length is invalid.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (a, p) = text.split_once('/').unwrap_or((text, ""));
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("invalid CIDR {text:?}: bad address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = if p.is_empty() {
            max
        } else {
            p.parse()
                .map_err(|_| format!("invalid CIDR {text:?}: bad prefix"))?
        };
        if prefix > max {
            return Err(format!("invalid CIDR {text:?}: prefix over {max}"));
        }
        Ok(Cidr { addr, prefix })
    }

    /// Whether `ip` is inside this network (IPv4-mapped IPv6 addresses match IPv4 networks).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix)
                };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix)
                };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

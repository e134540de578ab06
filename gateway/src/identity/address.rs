//! Where an agent's documents may be fetched from. An agent's metadata document names its
//! `jwks_uri`, and any of its URLs may redirect: the agent, not the operator, chooses those
//! hosts. So the gateway fetches them from global addresses only, unless `[session]
//! allow_private_hosts` names the host (as written in the URL). Pure: `http.rs` applies it
//! to each URL, each redirect and each address a name resolves to, before it connects.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::{Ipv4Net, Ipv6Net};
use reqwest::Url;

/// The IPv4 ranges that are not global, each with what it is (the IANA IPv4 Special-Purpose
/// Address Registry, with multicast and the reserved 240/4, which holds the broadcast).
const V4_NOT_GLOBAL: [(Ipv4Net, &str); 15] = [
    (v4(0, 0, 0, 0, 8), "unspecified (\"this network\")"),
    (v4(10, 0, 0, 0, 8), "private"),
    (v4(100, 64, 0, 0, 10), "shared (carrier-grade NAT)"),
    (v4(127, 0, 0, 0, 8), "loopback"),
    (v4(169, 254, 0, 0, 16), "link-local"),
    (v4(172, 16, 0, 0, 12), "private"),
    (v4(192, 0, 0, 0, 24), "IETF protocol"),
    (v4(192, 0, 2, 0, 24), "documentation"),
    (v4(192, 88, 99, 0, 24), "6to4 relay"),
    (v4(192, 168, 0, 0, 16), "private"),
    (v4(198, 18, 0, 0, 15), "benchmarking"),
    (v4(198, 51, 100, 0, 24), "documentation"),
    (v4(203, 0, 113, 0, 24), "documentation"),
    (v4(224, 0, 0, 0, 4), "multicast"),
    (v4(240, 0, 0, 0, 4), "reserved"),
];

/// Global unicast IPv6 is within 2000::/3 (RFC 4291); these parts of it are not global.
const V6_GLOBAL_UNICAST: Ipv6Net = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);
const V6_NOT_GLOBAL: [(Ipv6Net, &str); 4] = [
    // Teredo, ORCHID and other protocol assignments (some embed an IPv4 address).
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), "IETF protocol"),
    (v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), "documentation"),
    // 6to4 embeds any IPv4 address, a private one included.
    (v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), "6to4"),
    (v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), "documentation"),
];
/// NAT64's well-known prefix (RFC 6052): the IPv4 address in its last 32 bits is reached.
const V6_NAT64: Ipv6Net = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6(s: [u16; 8], len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
    )
}

/// What a non-global address is ("loopback", "private", …); `None` for a global one. An
/// IPv4 address inside IPv6 (mapped, or NAT64's) is what its IPv4 address is.
pub(crate) fn not_global(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => V4_NOT_GLOBAL
            .iter()
            .find(|(net, _)| net.contains(&v4))
            .map(|(_, kind)| *kind),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return not_global(IpAddr::V4(v4));
            }
            if V6_NAT64.contains(&v6) {
                let [.., a, b, c, d] = v6.octets();
                return not_global(IpAddr::V4(Ipv4Addr::new(a, b, c, d)));
            }
            if v6.is_unspecified() {
                return Some("unspecified");
            }
            if v6.is_loopback() {
                return Some("loopback");
            }
            if v6.is_multicast() {
                return Some("multicast");
            }
            if (v6.segments()[0] & 0xffc0) == 0xfe80 {
                return Some("link-local");
            }
            if (v6.segments()[0] & 0xfe00) == 0xfc00 {
                return Some("unique-local");
            }
            if !V6_GLOBAL_UNICAST.contains(&v6) {
                return Some("non-global");
            }
            V6_NOT_GLOBAL
                .iter()
                .find(|(net, _)| net.contains(&v6))
                .map(|(_, kind)| *kind)
        }
    }
}

/// `[session] allow_private_hosts`: the hosts an agent's documents may be fetched from
/// although they are (or resolve to) non-global addresses. By name, as the URL writes its
/// host: a DNS name (any case, a trailing dot ignored) or an IP address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PrivateHosts {
    names: Vec<String>,
    addresses: Vec<IpAddr>,
}

impl PrivateHosts {
    /// The list as written; an entry that is no host name or IP address (a URL, a port, a
    /// wildcard) is an error naming it.
    pub(crate) fn parse(entries: &[String]) -> Result<PrivateHosts, String> {
        let mut hosts = PrivateHosts::default();
        for entry in entries {
            let bare = entry.strip_prefix('[').and_then(|e| e.strip_suffix(']'));
            if let Ok(ip) = bare.unwrap_or(entry).parse::<IpAddr>() {
                hosts.addresses.push(ip);
            } else if is_dns_name(entry) {
                hosts.names.push(normal_name(entry));
            } else {
                return Err(format!(
                    "{entry:?} is not a host name or an IP address (no scheme, port, path or wildcard)"
                ));
            }
        }
        Ok(hosts)
    }

    fn allows_name(&self, name: &str) -> bool {
        let name = normal_name(name);
        self.names.contains(&name)
    }

    fn allows_address(&self, ip: IpAddr) -> bool {
        self.addresses.contains(&ip)
    }

    /// Whether `url`'s host may be fetched from as it is written: a name is checked again
    /// once resolved ([`PrivateHosts::screen`]); an IP address is checked here.
    pub(crate) fn check_url(&self, url: &Url) -> Result<(), String> {
        let Some(host) = url.host_str() else {
            return Err(format!("{url} has no host"));
        };
        // `Url` writes an IP address in its canonical form, an IPv6 one in brackets.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let Ok(ip) = bare.parse::<IpAddr>() else {
            return Ok(());
        };
        match not_global(ip) {
            Some(kind) if !self.allows_address(ip) => Err(refusal(&ip.to_string(), ip, kind)),
            _ => Ok(()),
        }
    }

    /// The addresses `name` resolved to, if it may be fetched from: all of them when the
    /// name is allowed, else only when every one is global (one that is not refuses the
    /// name: the gateway connects only to addresses it checked).
    pub(crate) fn screen(
        &self,
        name: &str,
        addresses: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, String> {
        if self.allows_name(name) {
            return Ok(addresses);
        }
        for address in &addresses {
            if let Some(kind) = not_global(address.ip()) {
                return Err(refusal(name, address.ip(), kind));
            }
        }
        Ok(addresses)
    }
}

fn refusal(host: &str, ip: IpAddr, kind: &str) -> String {
    let what = if host == ip.to_string() {
        format!("{ip} is a {kind} address")
    } else {
        format!("{host} resolves to {ip}, a {kind} address")
    };
    format!(
        "{what}: an agent's documents are fetched from global addresses only, unless [session] allow_private_hosts names {host:?}"
    )
}

fn normal_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// A DNS name: dot-separated labels of letters, digits, `-` and `_`, none empty.
fn is_dns_name(text: &str) -> bool {
    let text = text.strip_suffix('.').unwrap_or(text);
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_global_addresses_are_global() {
        for (address, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.31.255.255", "private"),
            ("192.168.0.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.100.0.1", "shared (carrier-grade NAT)"),
            ("0.0.0.0", "unspecified (\"this network\")"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("198.18.0.1", "benchmarking"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("fd00::1", "unique-local"),
            ("fc00::1", "unique-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("::127.0.0.1", "non-global"),
            ("2001:db8::1", "documentation"),
            ("2002:7f00:1::1", "6to4"),
            ("2001::1", "IETF protocol"),
            ("fec0::1", "non-global"),
        ] {
            assert_eq!(not_global(ip(address)), Some(kind), "{address}");
        }
        for global in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert_eq!(not_global(ip(global)), None, "{global}");
        }
    }

    #[test]
    fn hosts_are_allowed_by_name_as_written() {
        let hosts =
            PrivateHosts::parse(&["127.0.0.1".into(), "[::1]".into(), "Agent.Internal.".into()])
                .unwrap();
        let url = |u: &str| Url::parse(u).unwrap();
        assert!(hosts.check_url(&url("http://127.0.0.1:8080/a")).is_ok());
        assert!(hosts.check_url(&url("http://[::1]:8080/a")).is_ok());
        assert!(hosts.check_url(&url("https://agent.example/a")).is_ok());
        assert!(hosts.check_url(&url("https://8.8.8.8/a")).is_ok());
        for refused in [
            "http://127.0.0.2/a",
            // Other spellings of a loopback address the URL parser reads as one.
            "http://2130706434/a",
            "http://0x7f.0.0.2/a",
            "http://[::ffff:127.0.0.1]/a",
            "https://10.0.0.1/a",
            "https://[fd00::1]/a",
            "https://169.254.169.254/latest/meta-data",
        ] {
            let error = hosts.check_url(&url(refused)).unwrap_err();
            assert!(error.contains("allow_private_hosts"), "{refused}: {error}");
        }
        let at = |ip: &str| vec![SocketAddr::new(ip.parse().unwrap(), 443)];
        assert!(hosts.screen("agent.internal", at("10.0.0.5")).is_ok());
        assert!(hosts.screen("AGENT.internal.", at("10.0.0.5")).is_ok());
        assert!(hosts.screen("agent.example", at("93.184.215.14")).is_ok());
        let error = hosts.screen("localhost", at("127.0.0.1")).unwrap_err();
        assert!(
            error.contains("localhost resolves to 127.0.0.1, a loopback address"),
            "{error}"
        );
        let mut mixed = at("93.184.215.14");
        mixed.extend(at("10.0.0.5"));
        assert!(hosts.screen("agent.example", mixed).is_err());
        assert!(
            PrivateHosts::default()
                .check_url(&url("http://127.0.0.1/a"))
                .is_err()
        );
    }

    #[test]
    fn entries_are_hosts() {
        for bad in [
            "http://127.0.0.1",
            "127.0.0.1:8080",
            "*.internal",
            "agent.internal/x",
            "",
            "a..b",
        ] {
            assert!(PrivateHosts::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }
}

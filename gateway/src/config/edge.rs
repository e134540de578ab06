//! The settings of a proxy in front of real traffic: TLS on the listener, HTTP/2, passthrough
//! timeouts and TLS to the upstream, proxy headers and the access log. The serde model of
//! each table is here too, so `file.rs` only names them.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use toml::Spanned;

use super::duration::parse_duration;
use super::error::{At, ConfigError};

/// `[server.tls]`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsFile {
    pub cert_file: Spanned<String>,
    pub key_file: Spanned<String>,
    /// Offer HTTP/2 through ALPN (default true).
    pub http2: Option<bool>,
}

/// The keys of `[upstream]` (and of each `[[route]]`) for passthrough and TLS to upstreams.
/// (Fields of those tables: serde's `flatten` would lose `deny_unknown_fields`.)
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PassthroughKeys<'a> {
    pub read_timeout: Option<&'a Spanned<String>>,
    pub write_timeout: Option<&'a Spanned<String>>,
    pub idle_timeout: Option<&'a Spanned<String>>,
    pub host_header: Option<&'a Spanned<String>>,
    pub ca_file: Option<&'a Spanned<String>>,
    pub tls_verify: Option<bool>,
    pub operation_id_header: Option<&'a Spanned<String>>,
}

/// `[proxy_headers]`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProxyHeadersFile {
    pub trusted_proxies: Option<Spanned<Vec<String>>>,
    pub forwarded: Option<bool>,
    pub x_forwarded: Option<bool>,
}

/// `[access_log]`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AccessLogFile {
    pub path: Spanned<String>,
    pub format: Option<Spanned<String>>,
}

/// `[server.tls]`, validated: the files load and the key belongs to the certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub http2: bool,
}

/// How passthrough traffic (and approved forwards) reach one upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passthrough {
    /// Longest wait for the next bytes from the upstream (nginx `proxy_read_timeout`).
    pub read_timeout: Duration,
    /// Longest wait to write the next bytes to it (nginx `proxy_send_timeout`).
    pub write_timeout: Duration,
    /// How long an unused pooled connection is kept.
    pub idle_timeout: Duration,
    /// The `Host` sent upstream; `None` keeps the client's.
    pub host_header: Option<String>,
    /// Trust anchors for `https://` upstreams instead of the system's.
    pub ca_file: Option<PathBuf>,
    pub tls_verify: bool,
    /// The header an approved forward carries its operation ID in.
    pub operation_id_header: http::HeaderName,
}

impl Default for Passthrough {
    fn default() -> Passthrough {
        Passthrough {
            read_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            host_header: None,
            ca_file: None,
            tls_verify: true,
            operation_id_header: http::HeaderName::from_static("poppy-operation-id"),
        }
    }
}

/// `[proxy_headers]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyHeaders {
    /// Peers whose `Forwarded` / `X-Forwarded-*` headers are kept (and appended to).
    pub trusted_proxies: Vec<IpNet>,
    pub forwarded: bool,
    pub x_forwarded: bool,
}

impl Default for ProxyHeaders {
    fn default() -> ProxyHeaders {
        ProxyHeaders {
            trusted_proxies: Vec::new(),
            forwarded: true,
            x_forwarded: true,
        }
    }
}

impl ProxyHeaders {
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(&peer))
    }
}

/// Where access-log lines go and how they look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLog {
    pub target: LogTarget,
    pub format: LogFormat,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    Stdout,
    File(PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    /// nginx's `combined`, with the request ID, duration and operation appended.
    Combined,
}

/// `[server.tls]`: both files must load, and the key must be the certificate's.
pub(super) fn compile_tls(
    tls: &TlsFile,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<Tls> {
    let cert_file = folder.join(tls.cert_file.get_ref());
    let key_file = folder.join(tls.key_file.get_ref());
    match crate::tls::load_certified_key(&cert_file, &key_file) {
        Ok(_) => Some(Tls {
            cert_file,
            key_file,
            http2: tls.http2.unwrap_or(true),
        }),
        Err(e) => {
            let span = match e {
                crate::tls::TlsFileError::Key(..) | crate::tls::TlsFileError::Mismatch => {
                    tls.key_file.span()
                }
                _ => tls.cert_file.span(),
            };
            errors.push(at(span, format!("server.tls: {e}")));
            None
        }
    }
}

/// The passthrough keys of `[upstream]` or a `[[route]]`, `key` naming the table in errors.
pub(super) fn compile_passthrough(
    file: PassthroughKeys<'_>,
    table: &str,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Passthrough {
    let defaults = Passthrough::default();
    let mut timeout = |value: Option<&Spanned<String>>, key: &str, default: Duration| {
        let Some(v) = value else { return default };
        match parse_duration(v.get_ref()) {
            Ok(d) if d >= Duration::from_millis(100) => d,
            Ok(_) => {
                errors.push(at(
                    v.span(),
                    format!("{table}.{key}: must be at least 100ms"),
                ));
                default
            }
            Err(e) => {
                errors.push(at(v.span(), format!("{table}.{key}: {e}")));
                default
            }
        }
    };
    let read_timeout = timeout(file.read_timeout, "read_timeout", defaults.read_timeout);
    let write_timeout = timeout(file.write_timeout, "write_timeout", defaults.write_timeout);
    let idle_timeout = timeout(file.idle_timeout, "idle_timeout", defaults.idle_timeout);
    let host_header = file.host_header.and_then(|h| {
        let value = h.get_ref();
        let valid = !value.is_empty()
            && value.parse::<http::uri::Authority>().is_ok()
            && !value.contains('@');
        if !valid {
            errors.push(at(
                h.span(),
                format!("{table}.host_header: `{value}` is not a host[:port]"),
            ));
        }
        valid.then(|| value.clone())
    });
    let ca_file = file.ca_file.and_then(|c| {
        let path = folder.join(c.get_ref());
        match crate::tls::load_ca_file(&path) {
            Ok(()) => Some(path),
            Err(e) => {
                errors.push(at(c.span(), format!("{table}.ca_file: {e}")));
                None
            }
        }
    });
    let operation_id_header = match file.operation_id_header {
        None => defaults.operation_id_header,
        Some(h) => match http::HeaderName::from_bytes(h.get_ref().as_bytes()) {
            Ok(name) if !name.as_str().starts_with("poppy-approval") => name,
            _ => {
                errors.push(at(
                    h.span(),
                    format!(
                        "{table}.operation_id_header: `{}` is not a header name",
                        h.get_ref()
                    ),
                ));
                defaults.operation_id_header
            }
        },
    };
    Passthrough {
        read_timeout,
        write_timeout,
        idle_timeout,
        host_header,
        ca_file,
        tls_verify: file.tls_verify.unwrap_or(true),
        operation_id_header,
    }
}

pub(super) fn compile_proxy_headers(
    file: Option<&ProxyHeadersFile>,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> ProxyHeaders {
    let Some(file) = file else {
        return ProxyHeaders::default();
    };
    let mut trusted_proxies = Vec::new();
    if let Some(list) = &file.trusted_proxies {
        for entry in list.get_ref() {
            // A bare address is a /32 (or /128).
            let parsed = entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from));
            match parsed {
                Ok(net) => trusted_proxies.push(net),
                Err(_) => errors.push(at(
                    list.span(),
                    format!("proxy_headers.trusted_proxies: `{entry}` is neither an address nor a CIDR like 10.0.0.0/8"),
                )),
            }
        }
    }
    ProxyHeaders {
        trusted_proxies,
        forwarded: file.forwarded.unwrap_or(true),
        x_forwarded: file.x_forwarded.unwrap_or(true),
    }
}

pub(super) fn compile_access_log(
    file: Option<&AccessLogFile>,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<AccessLog> {
    let file = file?;
    let target = match file.path.get_ref().as_str() {
        "" => {
            errors.push(at(
                file.path.span(),
                "access_log.path: a file, or \"-\" for stdout".into(),
            ));
            return None;
        }
        "-" => LogTarget::Stdout,
        path => LogTarget::File(folder.join(path)),
    };
    let format = match file.format.as_ref().map(|f| (f, f.get_ref().as_str())) {
        None | Some((_, "json")) => LogFormat::Json,
        Some((_, "combined")) => LogFormat::Combined,
        Some((f, other)) => {
            errors.push(at(
                f.span(),
                format!("access_log.format: `{other}` is neither \"json\" nor \"combined\""),
            ));
            LogFormat::Json
        }
    };
    Some(AccessLog { target, format })
}

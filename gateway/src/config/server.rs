//! `[server]` and `[admin]`: the listeners and their limits, each default named.

use std::path::Path;
use std::time::Duration;

use super::duration::duration;
use super::edge;
use super::edge::Tls;
use super::error::{At, ConfigError};
use super::file::{AdminFile, ServerFile};
use super::secret::check_listen;
use toml::Spanned;

/// Worker threads.
pub(super) const DEFAULT_THREADS: usize = 2;
/// The largest request body to an action (1 MiB).
pub(super) const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Request bodies held at once (64 MiB).
pub(super) const DEFAULT_MAX_HELD_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Connections open at once.
pub(super) const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Streams one HTTP/2 connection may have open at once (pingora's and RFC 9113's suggestion).
pub(super) const DEFAULT_MAX_STREAMS_PER_CONNECTION: usize = 100;
pub(super) const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
pub(super) const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(60);
pub(super) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: String,
    pub threads: usize,
    pub max_body_bytes: usize,
    /// Request bodies held at once, in bytes (default 64 MiB).
    pub max_held_body_bytes: usize,
    /// The whole body of a request to an action must arrive within it (default 30 s).
    pub body_read_timeout: Duration,
    /// Every request head must arrive within it: the first from accept (a TLS handshake
    /// included), a kept-alive connection's next from the previous answer (default 60 s).
    pub header_read_timeout: Duration,
    /// Client connections open at once, from accept (a TLS handshake included; default 10000).
    pub max_connections: usize,
    /// Requests that may hold an upstream connection at once, across routes (default:
    /// `max_connections`).
    pub max_upstream_connections: usize,
    /// Streams an HTTP/2 client connection may have open at once (default 100).
    pub max_streams_per_connection: u32,
    pub shutdown_grace: Duration,
    /// `[server.tls]`: terminate TLS on `listen`.
    pub tls: Option<Tls>,
    /// Cleartext HTTP/2 (prior knowledge) on a listener without TLS.
    pub h2c: bool,
}

/// `[server]`.
pub(super) fn compile_server(
    server: &ServerFile,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Server {
    let listen = server.listen.get_ref().clone();
    check_listen("server", "127.0.0.1:8080", &server.listen, &[], at, errors);
    let threads = count(
        &server.threads,
        DEFAULT_THREADS,
        (1, Some(256)),
        "server.threads",
        at,
        errors,
    );
    let max_body_bytes = count(
        &server.max_body_bytes,
        DEFAULT_MAX_BODY_BYTES,
        (1, None),
        "server.max_body_bytes",
        at,
        errors,
    );
    let max_held_body_bytes = server
        .max_held_body_bytes
        .as_ref()
        .map(|m| *m.get_ref())
        .unwrap_or(DEFAULT_MAX_HELD_BODY_BYTES);
    if let Some(m) = &server.max_held_body_bytes
        && *m.get_ref() < max_body_bytes
    {
        errors.push(at(
            m.span(),
            format!("server.max_held_body_bytes: must be at least server.max_body_bytes ({max_body_bytes}), or no body could be held"),
        ));
    }
    let max_connections = count(
        &server.max_connections,
        DEFAULT_MAX_CONNECTIONS,
        (1, None),
        "server.max_connections",
        at,
        errors,
    );
    // An HTTP/1.1 connection uses one upstream connection at a time: by default HTTP/2
    // connections, whose streams each use one, are held to the same total.
    let max_upstream_connections = count(
        &server.max_upstream_connections,
        max_connections,
        (1, None),
        "server.max_upstream_connections",
        at,
        errors,
    );
    let max_streams_per_connection = count(
        &server.max_streams_per_connection,
        DEFAULT_MAX_STREAMS_PER_CONNECTION,
        (1, Some(u32::MAX as usize)),
        "server.max_streams_per_connection",
        at,
        errors,
    );
    let body_read_timeout = duration(
        &server.body_read_timeout,
        DEFAULT_BODY_READ_TIMEOUT,
        "server.body_read_timeout",
        at,
        errors,
    );
    let header_read_timeout = duration(
        &server.header_read_timeout,
        DEFAULT_HEADER_READ_TIMEOUT,
        "server.header_read_timeout",
        at,
        errors,
    );
    for (value, timeout, key) in [
        (
            &server.body_read_timeout,
            body_read_timeout,
            "server.body_read_timeout",
        ),
        (
            &server.header_read_timeout,
            header_read_timeout,
            "server.header_read_timeout",
        ),
    ] {
        if let Some(v) = value
            && timeout < Duration::from_millis(100)
        {
            errors.push(at(v.span(), format!("{key}: must be at least 100ms")));
        }
    }
    let shutdown_grace = duration(
        &server.shutdown_grace,
        DEFAULT_SHUTDOWN_GRACE,
        "server.shutdown_grace",
        at,
        errors,
    );

    let listener_tls = server
        .tls
        .as_ref()
        .and_then(|t| edge::compile_tls(t, folder, at, errors));
    Server {
        listen,
        threads,
        max_body_bytes,
        max_held_body_bytes,
        body_read_timeout,
        header_read_timeout,
        max_connections,
        max_upstream_connections,
        max_streams_per_connection: u32::try_from(max_streams_per_connection).unwrap_or(u32::MAX),
        shutdown_grace,
        tls: listener_tls,
        h2c: server.h2c.unwrap_or(false),
    }
}

/// A count key: its value, or `default`; a value outside `(min, max)` is an error at it.
fn count(
    value: &Option<Spanned<usize>>,
    default: usize,
    (min, max): (usize, Option<usize>),
    key: &str,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> usize {
    let Some(value) = value else {
        return default;
    };
    let n = *value.get_ref();
    if n < min || max.is_some_and(|max| n > max) {
        let rule = match max {
            Some(max) => format!("must be {min} to {max}"),
            None => format!("must be at least {min}"),
        };
        errors.push(at(value.span(), format!("{key}: {rule}")));
    }
    n
}

/// `[admin]`: its listen address, when the table is there.
pub(super) fn compile_admin(
    admin: Option<&AdminFile>,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<String> {
    admin.map(|a| {
        check_listen("admin", "127.0.0.1:9100", &a.listen, &[], at, errors);
        a.listen.get_ref().clone()
    })
}

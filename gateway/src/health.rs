//! `poppy-gateway health`: one `GET /healthz` to the admin listener the config names, for a
//! container's health check (the image has no curl, and the port must be the configured one,
//! not a number written into the Dockerfile).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("the config has no [admin] listener to ask")]
    NoAdminListener,
    #[error("admin.listen {0}: not an address to connect to")]
    Address(String),
    #[error("GET http://{address}/healthz: {error}")]
    Io {
        address: SocketAddr,
        error: std::io::Error,
    },
    #[error("GET http://{address}/healthz answered {status_line:?}")]
    Unhealthy {
        address: SocketAddr,
        status_line: String,
    },
}

/// Where to reach a listener from inside its own host: a wildcard address (`0.0.0.0`, `[::]`)
/// is reached on loopback.
pub(crate) fn probe_address(listen: &str) -> Result<SocketAddr, HealthError> {
    let mut address = listen
        .to_socket_addrs()
        .ok()
        .and_then(|mut all| all.next())
        .ok_or_else(|| HealthError::Address(listen.to_owned()))?;
    if address.ip().is_unspecified() {
        address.set_ip(match address {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(address)
}

/// Ask the admin listener at `admin_listen` (gateway.toml's `[admin] listen`, read alone by
/// [`crate::config::admin_listen`]) whether the gateway is up.
pub fn check(admin_listen: Option<&str>, timeout: Duration) -> Result<(), HealthError> {
    let listen = admin_listen.ok_or(HealthError::NoAdminListener)?;
    let address = probe_address(listen)?;
    let io = |error| HealthError::Io { address, error };
    let mut stream = TcpStream::connect_timeout(&address, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .map_err(io)?;
    // The status line is all that is needed; the answer is a few bytes.
    let mut head = [0u8; 64];
    let read = stream.read(&mut head).map_err(io)?;
    let text = String::from_utf8_lossy(&head[..read]);
    let status_line = text.lines().next().unwrap_or_default().to_owned();
    if status_line.starts_with("HTTP/1.1 200 ") || status_line.starts_with("HTTP/1.0 200 ") {
        Ok(())
    } else {
        Err(HealthError::Unhealthy {
            address,
            status_line,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn wildcard_listeners_are_probed_on_loopback() {
        assert_eq!(
            probe_address("0.0.0.0:9100").unwrap(),
            "127.0.0.1:9100".parse().unwrap()
        );
        assert_eq!(
            probe_address("[::]:9100").unwrap(),
            "[::1]:9100".parse().unwrap()
        );
        assert_eq!(
            probe_address("10.1.2.3:9101").unwrap(),
            "10.1.2.3:9101".parse().unwrap()
        );
        assert!(matches!(
            probe_address("nonsense"),
            Err(HealthError::Address(_))
        ));
    }
}

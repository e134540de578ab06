//! `poppy-gateway health`: one `GET /healthz` to the admin listener the config names, for a
//! container's health check (the image has no curl, and the port must be the configured one,
//! not a number written into the Dockerfile); `poppy-gateway reload`: one `POST /reload`
//! there (the image has no `kill` either).

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
    let address = probe_address(admin_listen.ok_or(HealthError::NoAdminListener)?)?;
    let io = |error| HealthError::Io { address, error };
    let answer = call(
        address,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        timeout,
    )
    .map_err(io)?;
    if answer.is_ok() {
        Ok(())
    } else {
        Err(HealthError::Unhealthy {
            address,
            status_line: answer.status_line,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Address(#[from] HealthError),
    #[error("POST http://{address}/reload: {error}")]
    Io {
        address: SocketAddr,
        error: std::io::Error,
    },
    #[error("POST http://{address}/reload answered {status_line:?}: {body}")]
    Refused {
        address: SocketAddr,
        status_line: String,
        body: String,
    },
}

/// `poppy-gateway reload`: `POST /reload` to the admin listener with the admin token, for an
/// image without `kill`. Returns the answer's JSON body.
pub fn reload(
    admin_listen: Option<&str>,
    token: &str,
    timeout: Duration,
) -> Result<String, ReloadError> {
    let address = probe_address(admin_listen.ok_or(HealthError::NoAdminListener)?)?;
    let request = format!(
        "POST /reload HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let answer =
        call(address, &request, timeout).map_err(|error| ReloadError::Io { address, error })?;
    if answer.is_ok() {
        Ok(answer.body)
    } else {
        Err(ReloadError::Refused {
            address,
            status_line: answer.status_line,
            body: answer.body.trim_end().to_owned(),
        })
    }
}

struct Answer {
    status_line: String,
    body: String,
}

impl Answer {
    fn is_ok(&self) -> bool {
        self.status_line.starts_with("HTTP/1.1 200 ")
            || self.status_line.starts_with("HTTP/1.0 200 ")
    }
}

/// One request on its own connection (`Connection: close`: the answer ends with the stream;
/// the admin listener sends a Content-Length, never chunks).
fn call(address: SocketAddr, request: &str, timeout: Duration) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(request.as_bytes())?;
    // The admin answers here are small; a bound keeps a wrong listener from filling memory.
    let mut raw = Vec::new();
    stream.take(1024 * 1024).read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok(Answer {
        status_line: head.lines().next().unwrap_or_default().to_owned(),
        body: body.to_owned(),
    })
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

//! Free TCP ports on the loopback interface. Never fixed ports, never 6379.

use std::net::TcpListener;

/// A port that was free a moment ago: bind `127.0.0.1:0`, read the port, drop the listener.
///
/// There is a small window in which another process can take it; the servers this harness
/// starts retry once with a new port when they fail to start.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 for a free port");
        let port = listener
            .local_addr()
            .expect("local address of a bound listener")
            .port();
        if port != 6379 {
            return port;
        }
    }
}

/// A port that stays taken but refuses every connection, until the socket is dropped: bound,
/// never listening. For "nothing listens there" tests: a port from [`free_port`] could be
/// taken meanwhile by another test's server, which would then receive what was meant to be
/// refused.
pub fn refusing_port() -> (u16, tokio::net::TcpSocket) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind 127.0.0.1:0");
    let port = socket.local_addr().expect("a bound address").port();
    (port, socket)
}

/// Whether process `pid` holds the socket listening on `port` (Linux: `/proc/net/tcp` and
/// `tcp6` name each listening socket's inode, `/proc/PID/fd` the process's sockets).
pub fn listens_on(pid: u32, port: u16) -> bool {
    let wanted = format!(":{port:04X}");
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let listening = fields.get(3) == Some(&"0A");
                    let local = fields.get(1)?;
                    (listening && local.ends_with(&wanted))
                        .then(|| fields.get(9).map(|i| format!("socket:[{i}]")))?
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|link| {
            inodes
                .iter()
                .any(|inode| link.as_os_str() == inode.as_str())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_known_by_the_process_that_holds_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listens_on(std::process::id(), port));
        // Another process (init) does not hold it.
        assert!(!listens_on(1, port));
        drop(listener);
        assert!(!listens_on(std::process::id(), port));
    }
}

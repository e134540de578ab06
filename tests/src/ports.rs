//! Free TCP ports on the loopback interface. Never fixed ports, never 6379.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// A port that was free a moment ago, below the kernel's ephemeral range.
///
/// Ports from `bind(127.0.0.1:0)` come from the ephemeral range, which every outgoing
/// connection on the machine also draws from: under a busy test run one of them often takes
/// the port between choosing and binding it. Below that range only listeners bind, so a port
/// is taken there only by another listener. Within this process the ports are handed out in
/// turn (never the same one twice in a row of ~20,000), from a start that differs per process.
/// There is still a small window in which another process can take it; the servers this
/// harness starts retry once with a new port when they fail to start.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let (low, high) = listener_range();
    let span = u32::from(high - low);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        first_offset(span),
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::SeqCst) % span;
        let Ok(port) = u16::try_from(u32::from(low) + offset) else {
            continue;
        };
        if port != 6379 && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    any_free_port()
}

/// Ports from 10000 to the start of the ephemeral range (Linux's
/// `/proc/sys/net/ipv4/ip_local_port_range`, 32768 by default).
fn listener_range() -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if ephemeral_low > 11_000 {
        (10_000, ephemeral_low)
    } else {
        (40_000, 60_000)
    }
}

/// Where this process starts in the range: apart from other test processes.
fn first_offset(span: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    (std::process::id().wrapping_mul(7919) ^ nanos) % span
}

/// Any free port, from the kernel (the range above was full).
fn any_free_port() -> u16 {
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

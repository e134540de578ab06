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

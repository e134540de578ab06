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

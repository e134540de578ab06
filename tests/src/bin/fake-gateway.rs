//! A stand-in for `poppy-gateway`, only for the harness self-test (`tests/tests/harness.rs`):
//! it reads the two `listen` addresses of a gateway.toml, answers 200 to everything on both,
//! and says on stderr what it was given. `FAKE_GATEWAY_EXIT=CODE` makes it exit at once.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(config) = args
        .iter()
        .position(|a| a == "--config")
        .and_then(|i| args.get(i + 1))
    else {
        eprintln!("fake-gateway: --config PATH is required");
        std::process::exit(2);
    };
    if let Ok(code) = std::env::var("FAKE_GATEWAY_EXIT") {
        eprintln!("fake-gateway: exiting with {code} as asked");
        std::process::exit(code.parse().unwrap_or(1));
    }
    let text = match std::fs::read_to_string(config) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("fake-gateway: {config}: {e}");
            std::process::exit(2);
        }
    };
    // gateway.toml as the harness writes it: [server] listen first, [admin] listen second.
    let listens: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("listen = \""))
        .map(|rest| rest.trim_end_matches('"').to_owned())
        .collect();
    let [server, admin] = listens.as_slice() else {
        eprintln!("fake-gateway: expected two listen addresses, found {listens:?}");
        std::process::exit(2);
    };
    let keys = if std::env::var_os("POPPY_GATEWAY_KEYS").is_some() {
        "set"
    } else {
        "unset"
    };
    eprintln!("fake-gateway: listen={server} admin={admin} keys={keys}");
    let server = bind(server);
    let admin = bind(admin);
    std::thread::spawn(move || serve(admin, "admin"));
    serve(server, "proxy");
}

fn bind(addr: &str) -> TcpListener {
    TcpListener::bind(addr).unwrap_or_else(|e| {
        eprintln!("fake-gateway: bind {addr}: {e}");
        std::process::exit(3);
    })
}

fn serve(listener: TcpListener, name: &'static str) {
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || answer(stream, name));
    }
}

fn answer(mut stream: TcpStream, name: &str) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let body = format!("{{\"fake\":\"{name}\"}}");
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
}

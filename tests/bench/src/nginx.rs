//! The baseline: Debian's nginx as a plain `proxy_pass` reverse proxy, configured the way a
//! careful operator would (keep-alive to the upstream, HTTP/1.1 upstream, no access log), with
//! as many workers as the gateway has threads.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::procs::{Proc, Spawn, free_port, loopback};
use crate::rows::Role;

/// The nginx.conf of the baseline.
pub fn config(
    dir: &Path,
    listen: u16,
    upstream: SocketAddr,
    workers: usize,
    as_root: bool,
    role: Role,
) -> String {
    let dir = dir.display();
    // Run as root, nginx would switch its workers to `nobody`, who cannot enter the bench's
    // private temporary folder; the workers stay root instead.
    let user = if as_root { "user root;\n" } else { "" };
    let location = match role {
        Role::Proxy => "proxy_pass http://bench_upstream;\n            proxy_http_version 1.1;\n            proxy_set_header Connection \"\";".to_owned(),
        Role::Answer => format!(
            "default_type application/json;\n            add_header cache-control no-store always;\n            return 403 \"{}\";",
            // An nginx string in double quotes: the body has single quotes, no `$` or `\\`.
            crate::scenario::MINT_ANSWER.replace('"', "\\\"")
        ),
        Role::Sink => "return 200;".to_owned(),
    };
    format!(
        r#"{user}worker_processes {workers};
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;

    upstream bench_upstream {{
        server {upstream};
        keepalive 64;
    }}

    server {{
        listen 127.0.0.1:{listen};
        location / {{
            {location}
        }}
    }}
}}
"#
    )
}

/// Start nginx in `dir` in front of `upstream`; returns it and its address.
pub fn start(
    program: &Path,
    dir: &Path,
    upstream: SocketAddr,
    workers: usize,
    cpus: Option<&str>,
    role: Role,
) -> anyhow::Result<(Proc, SocketAddr)> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, config(dir, port, upstream, workers, is_root(), role))
        .with_context(|| format!("write {}", conf.display()))?;
    let mut proc = Spawn {
        name: "nginx",
        program,
        args: vec![
            "-p".into(),
            dir.display().to_string(),
            "-e".into(),
            dir.join("error.log").display().to_string(),
            "-c".into(),
            conf.display().to_string(),
        ],
        env: Vec::new(),
        cpus,
        log: Some(dir.join("nginx.out")),
        stdin_piped: false,
        terminate: true,
    }
    .start()?;
    let addr = loopback(port);
    proc.wait_for_port(addr, Duration::from_secs(10))?;
    Ok((proc, addr))
}

/// Whether this process runs as root (uid 0), from `/proc/self/status`.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|uids| uids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_keeps_upstream_connections_alive() {
        let conf = config(
            Path::new("/tmp/x"),
            8081,
            loopback(9000),
            2,
            false,
            Role::Proxy,
        );
        for needle in [
            "worker_processes 2;",
            "keepalive 64;",
            "proxy_http_version 1.1;",
            "proxy_set_header Connection \"\";",
            "access_log off;",
            "server 127.0.0.1:9000;",
            "listen 127.0.0.1:8081;",
        ] {
            assert!(conf.contains(needle), "{needle}");
        }
        assert!(!conf.contains("user root"));
    }

    #[test]
    fn answering_nginx_returns_the_mint_answer_and_proxies_nothing() {
        let conf = config(
            Path::new("/tmp/x"),
            8081,
            loopback(9000),
            1,
            false,
            Role::Answer,
        );
        assert!(conf.contains(r#"return 403 "{\"detail\":"#), "{conf}");
        assert!(!conf.contains("proxy_pass"), "{conf}");
    }
}

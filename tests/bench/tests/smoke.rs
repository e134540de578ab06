//! The only part of the benchmark that `cargo test` runs: row 1 (the bench upstream driven by
//! the bench load generator, both as real child processes) for one second, and its report.
//! The full benchmark is `tests/bench/run.sh`.

use std::process::Command;

#[test]
fn one_second_of_row_one_prints_a_table() {
    let output = Command::new(env!("CARGO_BIN_EXE_poppy-bench"))
        .args([
            "--rows",
            "1",
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--connections",
            "4",
        ])
        .output()
        .expect("run poppy-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "poppy-bench failed:\n{stderr}\n{stdout}"
    );
    let row = stdout
        .lines()
        .find(|line| line.starts_with("| 1 | upstream direct (POST) |"))
        .unwrap_or_else(|| panic!("no row 1 in:\n{stdout}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let rps: f64 = cells[3].parse().expect("req/s is a number");
    assert!(rps > 0.0, "{row}");
    assert_eq!(cells[4], "1.00", "row 1 is its own reference: {row}");
    assert_eq!(cells.get(17), Some(&"0"), "no errors: {row}");
    // Nothing but row 1 was asked for: no gateway, nginx or Redis was needed.
    assert!(
        stdout.contains("| idle RSS ≤ 32 MiB | no gateway row run | – |"),
        "{stdout}"
    );
}

/// The bare-pingora reference row proxies the bench upstream: it answers, with no errors, and
/// its CPU per request is measured (pingora's share of the gateway's passthrough cost).
#[test]
fn the_bare_pingora_row_proxies_the_upstream() {
    let output = Command::new(env!("CARGO_BIN_EXE_poppy-bench"))
        .args([
            "--rows",
            "2p",
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--connections",
            "4",
            "--pingora-bin",
            env!("CARGO_BIN_EXE_poppy-bench-pingora"),
        ])
        .output()
        .expect("run poppy-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "poppy-bench failed:\n{stderr}\n{stdout}"
    );
    let row = stdout
        .lines()
        .find(|line| line.starts_with("| 2p | bare pingora → upstream (POST) |"))
        .unwrap_or_else(|| panic!("no row 2p in:\n{stdout}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let rps: f64 = cells[3].parse().expect("req/s is a number");
    assert!(rps > 0.0, "{row}");
    let cpu: f64 = cells[13].parse().expect("CPU µs/req is measured");
    assert!(cpu > 0.0, "{row}");
    assert_eq!(cells.get(17), Some(&"0"), "no errors: {row}");
}

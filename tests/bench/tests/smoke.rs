//! The only part of the benchmark that `cargo test` runs: row 1 (the bench upstream driven by
//! the bench load generator, both as real child processes) for one second, and its report.
//! The full benchmark is `tests/bench/run.sh`.

use std::process::Command;

/// Run poppy-bench with `args`; its report, once it has succeeded.
fn bench(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_poppy-bench"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run poppy-bench: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "poppy-bench failed:\n{stderr}\n{stdout}"
    );
    stdout
}

#[test]
fn one_second_of_row_one_prints_a_table() {
    let stdout = bench(&[
        "--rows",
        "1",
        "--duration",
        "1s",
        "--warmup",
        "0s",
        "--connections",
        "4",
    ]);
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
    let stdout = bench(&[
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
    ]);
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

/// The open-loop latency row of the upstream direct (issue 41): sent at the rate asked, on a
/// schedule, its latency percentiles in the fixed-rate table, no errors.
#[test]
fn one_second_of_the_open_loop_row_prints_its_latency() {
    let stdout = bench(&[
        "--rows",
        "L1",
        "--duration",
        "1s",
        "--warmup",
        "0s",
        "--rate",
        "500",
    ]);
    let row = stdout
        .lines()
        .find(|line| line.starts_with("| L1 | upstream direct (POST) |"))
        .unwrap_or_else(|| panic!("no row L1 in:\n{stdout}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[3], "500", "sent at the rate asked: {row}");
    let done: f64 = cells[4].parse().expect("req/s is a number");
    // An open loop sends on schedule whatever the answers: about the rate, never far above.
    assert!((400.0..=550.0).contains(&done), "{row}");
    let p999: f64 = cells[7].parse().expect("p99.9 is a number");
    assert!(p999 > 0.0, "{row}");
    assert_eq!(cells.get(12), Some(&"0"), "no errors: {row}");
    // Only in the fixed-rate table, not in the closed-loop one.
    assert_eq!(stdout.matches("| L1 |").count(), 1, "{stdout}");
}

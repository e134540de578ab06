//! `poppy-bench`: runs the side-by-side benchmark and prints the report (see BENCHMARKS.md).

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use poppy_bench::children::{LineHooks, say};
use poppy_bench::cli::{Cli, Internal};
use poppy_bench::load::{self, LoadSpec};
use poppy_bench::{report, run, upstream};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Some(Internal::Upstream { port }) => serve_upstream(port),
        Some(Internal::Load { spec }) => drive_load(&spec),
        None => benchmark(&cli),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("poppy-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn benchmark(cli: &Cli) -> anyhow::Result<()> {
    let options = cli.run.options()?;
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let report = run::run(options, command_line)?;
    println!("{}", report::render(&report));
    if let Some(path) = &cli.run.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// One thread: the CPU plan gives the upstream its CPU, and a single-threaded runtime is the
/// cheapest way to use exactly one.
fn serve_upstream(port: u16) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (listener, addr) = upstream::bind(port).await?;
        say(&format!("listening {addr}"));
        upstream::serve(listener).await
    })
}

fn drive_load(spec: &str) -> anyhow::Result<()> {
    let spec: LoadSpec = serde_json::from_str(spec).context("--spec is not a LoadSpec")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match runtime.block_on(load::run(&spec, &mut LineHooks)) {
        Ok(result) => {
            say(&format!("result {}", serde_json::to_string(&result)?));
            Ok(())
        }
        Err(error) => {
            say(&format!("error {error:#}"));
            Err(error)
        }
    }
}

//! poppy-bench: poppy-gateway side by side with its upstream alone and with nginx, on one
//! machine, in one run. See `BENCHMARKS.md` at the repository root.

pub mod children;
pub mod cli;
pub mod cpu;
pub mod env;
pub mod gateway;
pub mod held;
pub mod http1;
pub mod load;
pub mod nginx;
pub mod pingora;
pub mod procs;
pub mod real;
pub mod redis;
pub mod report;
pub mod roundtrips;
pub mod rows;
pub mod run;
pub mod scaling;
pub mod scenario;
pub mod signer;
pub mod upstream;
pub mod wrk;

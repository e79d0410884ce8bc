//! `stoa bench`: a load generator that speaks the ZooKeeper protocol
//! through the project's Rust client, so the same code drives Stoa and
//! Apache ZooKeeper, and the papers' experiments as named scenarios; with
//! `--target etcd` it runs the same op mixes against etcd's v3 API
//! (`etcd`). `scripts/bench-compare` runs it against all three and writes
//! `docs/benchmarks.md`.

mod clock;
mod cpu;
mod driver;
pub mod etcd;
pub mod ezk;
mod file;
pub mod mix;
pub mod options;
pub mod prim;
pub mod report;
pub mod scenario;

use std::process::ExitCode;

use stoa_client::tokio;

pub use options::{Args, Cell, Target, Workload, USAGE};
pub use report::CellResult;

/// Runs every cell against `servers` (etcd endpoints for a cell whose
/// target is etcd), one after the other, on `threads`
/// runtime threads. One thread (tokio's current-thread runtime) is the
/// default: on a 2-core machine shared with the server, a multi-thread
/// runtime spent about 4x more CPU per call in the load generator (cross-
/// thread wake-ups) and capped what the server could show.
pub fn run(servers: &str, cells: &[Cell], threads: usize) -> Result<Vec<CellResult>, String> {
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
    .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let mut results = Vec::with_capacity(cells.len());
        for cell in cells {
            results.push(match cell.target {
                Target::Etcd => etcd::run(servers, cell).await?,
                Target::File => file::run(servers, cell).await?,
                Target::ZooKeeper if cell.workload.lock().is_some() => {
                    let primitive = cell.workload.lock().expect("a lock workload");
                    prim::run(servers, cell, primitive).await?
                }
                Target::ZooKeeper if cell.workload.is_ezk() => ezk::run(servers, cell).await?,
                Target::ZooKeeper => driver::run(servers, cell).await?,
            });
        }
        Ok(results)
    })
}

/// The `stoa bench` command line.
pub fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match main_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stoa bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main_inner(args: &[String]) -> Result<(), String> {
    let args = Args::parse(args).map_err(|e| format!("{e}\n{USAGE}"))?;
    if let Some(root) = &args.root {
        driver::set_root(root)?;
    }
    let cells = match &args.scenario {
        Some(name) => scenario::cells(name, &args)?,
        None => vec![args.cell()],
    };
    let results = run(&args.servers(), &cells, args.threads.unwrap_or(1))?;
    if !args.quiet {
        print!("{}", report::table(&results));
    }
    if let Some(path) = &args.json {
        report::write_json(path, &results)?;
    }
    if let Some(path) = &args.csv {
        report::append_csv(path, &results)?;
    }
    Ok(())
}

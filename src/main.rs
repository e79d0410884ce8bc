//! The `stoa` binary: `stoa server` runs a server; more subcommands (shell,
//! bench, admin) join as they are built.

use std::path::PathBuf;
use std::process::ExitCode;

use stoa_server::ServerConfig;

/// mimalloc rather than glibc's malloc: with glibc, the frees of a large
/// batch (a compacted raft log, a snapshot's tree copy dropped on its own
/// thread) left the partition thread's next large allocation consolidating
/// them, 20-50 ms pauses that were most of the write p99 at 55k writes/s;
/// with mimalloc the same load's p99 stays at 3-9 ms. Throughput and
/// resident memory came out the same.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage:
  stoa server [--config zoo.cfg] [--port N] [--bind ADDR] [--data-dir DIR] [--partitions N|auto]
              [--jaas JAAS.conf] [--set key=value]...
      Runs a standalone server. Without --config: port 2181, data in ./data.
      --config reads an Apache ZooKeeper zoo.cfg; flags override the file.
  stoa import --zk-data-dir DIR [--zk-log-dir DIR] --data-dir DIR [--data-log-dir DIR]
      Converts a stopped ZooKeeper's data directory (3.5 to 3.9) into a new Stoa one.
  stoa shell [-server host:port[,host:port]] [-timeout ms] [command args...]
      A zkCli-compatible shell: runs one command, or reads commands from stdin.
  stoa bench [--servers host:port[,..]] [--sessions N] [--outstanding K] [--mix op=w,..]
             [--duration SECS | --ops N] [--scenario NAME] [--json FILE] ...
      Load generator over the ZooKeeper protocol (stoa bench --help for all options).
  stoa help";

fn main() -> ExitCode {
    stoa_server::memory::disable_transparent_huge_pages();
    stoa_server::logging::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("server") => match server(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                log::error!("{e}");
                eprintln!("stoa server: {e}");
                ExitCode::FAILURE
            }
        },
        Some("import") => match import(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("stoa import: {e}");
                ExitCode::FAILURE
            }
        },
        Some("shell") => stoa_client::shell::main(&args[1..]),
        Some("bench") => stoa_bench::main(&args[1..]),
        Some("help") | Some("--help") | Some("-h") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// `stoa import`: a stopped ZooKeeper's dataDir (and dataLogDir) into a
/// new Stoa data directory.
fn import(args: &[String]) -> Result<(), String> {
    let (mut zk_data, mut zk_log, mut data, mut data_log) = (None, None, None, None);
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let value = args
            .get(i + 1)
            .map(PathBuf::from)
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag {
            "--zk-data-dir" => zk_data = Some(value),
            "--zk-log-dir" => zk_log = Some(value),
            "--data-dir" => data = Some(value),
            "--data-log-dir" => data_log = Some(value),
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
        i += 2;
    }
    let (Some(zk_data), Some(data)) = (zk_data, data) else {
        return Err(format!("--zk-data-dir and --data-dir are needed\n{USAGE}"));
    };
    let zk_log = zk_log.unwrap_or_else(|| zk_data.clone());
    let wal_dir = data_log.unwrap_or_else(|| data.clone()).join("wal");
    let (tree, imported) = stoa_server::import::restore(&zk_data, &zk_log)?;
    stoa_server::import::write_data_dir(&tree, &data, &wal_dir)?;
    println!(
        "imported {} znodes and {} sessions at zxid {:#x} ({}, then {} logged transactions) into {}",
        imported.nodes,
        imported.sessions,
        imported.last_zxid,
        imported
            .snapshot
            .as_ref()
            .map_or("no snapshot".to_string(), |p| p.display().to_string()),
        imported.transactions_replayed,
        data.display()
    );
    Ok(())
}

fn server(args: &[String]) -> Result<(), String> {
    let mut config = ServerConfig::default();
    let mut overrides: Vec<(String, String)> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let value = args
            .get(i + 1)
            .cloned()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag {
            "--config" => {
                let (file_config, warnings) =
                    ServerConfig::from_file(&PathBuf::from(&value)).map_err(|e| e.to_string())?;
                config = file_config;
                for w in warnings {
                    log::warn!("{w}");
                }
            }
            "--port" => overrides.push(("clientPort".into(), value)),
            "--bind" => overrides.push(("clientPortAddress".into(), value)),
            "--data-dir" => overrides.push(("dataDir".into(), value)),
            "--partitions" => overrides.push(("partitions".into(), value)),
            "--jaas" => overrides.push(("jaasLoginConfig".into(), value)),
            "--set" => {
                let (k, v) = value
                    .split_once('=')
                    .ok_or_else(|| format!("--set expects key=value, got {value:?}"))?;
                overrides.push((k.into(), v.into()));
            }
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
        i += 2;
    }
    // Flags override the file, whatever their order on the command line.
    for (k, v) in overrides {
        if let Some(w) = config.set(&k, &v).map_err(|e| e.to_string())? {
            log::warn!("{w}");
        }
    }
    stoa_server::run(config)
}

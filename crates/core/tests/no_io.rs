//! The core does no I/O of its own: no runtime, socket, libc or allocator
//! crate among its dependencies, and no file, socket, thread, process,
//! environment or clock call in its sources outside the simulators (which
//! read their seed from the environment and print what a seed did). Time
//! and input come from the caller; `stoa-server` owns the machine.

use std::path::{Path, PathBuf};

/// Crates that would let the core reach the machine.
const BANNED_DEPENDENCIES: &[&str] = &[
    "tokio",
    "libc",
    "mio",
    "socket2",
    "nix",
    "mimalloc",
    "libmimalloc-sys",
];

/// Calls that reach the machine, each with what the core does instead.
const BANNED_CALLS: &[(&str, &str)] = &[
    ("std::fs", "a SnapshotStore or LogSink the caller passes in"),
    ("File::", "a SnapshotStore or LogSink the caller passes in"),
    ("TcpStream", "a Transport the caller passes in"),
    ("TcpListener", "a Transport the caller passes in"),
    ("UdpSocket", "a Transport the caller passes in"),
    ("ToSocketAddrs", "addresses resolved by the server crate"),
    ("thread::spawn", "the caller's threads"),
    ("thread::Builder", "the caller's threads"),
    ("thread::sleep", "time fed in through Engine::set_time"),
    ("Instant::now", "time fed in through Engine::set_time"),
    ("SystemTime", "time fed in through Engine::set_time"),
    ("std::process", "an error returned to the caller"),
    ("std::env::var", "configuration passed in (EngineConfig)"),
    ("println!", "the log crate"),
    ("eprintln!", "the log crate"),
];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Source files that are compiled only into tests: the simulators.
fn test_only(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with("sim.rs") || name.ends_with("tests.rs")
}

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_core_depends_on_no_runtime_socket_or_libc_crate() {
    let manifest = std::fs::read_to_string(crate_dir().join("Cargo.toml")).expect("manifest");
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .expect("a [dependencies] table")
        .split("\n[")
        .next()
        .unwrap_or("");
    for line in dependencies.lines() {
        let name = line.split('=').next().unwrap_or("").trim();
        assert!(
            !BANNED_DEPENDENCIES.contains(&name),
            "stoa-core depends on {name}: I/O belongs in stoa-server"
        );
    }
}

#[test]
fn the_core_sources_make_no_io_calls() {
    let mut sources = Vec::new();
    rust_sources(&crate_dir().join("src"), &mut sources);
    assert!(sources.len() > 10, "found the sources");
    let mut found = Vec::new();
    for path in sources.iter().filter(|p| !test_only(p)) {
        let text = std::fs::read_to_string(path).expect("source");
        // Code only: the unit tests at the end of a file may use the machine.
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        for (number, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (call, instead) in BANNED_CALLS {
                if line.contains(call) {
                    found.push(format!(
                        "{}:{}: {call} (use {instead})",
                        path.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "I/O in the core:\n{}", found.join("\n"));
}

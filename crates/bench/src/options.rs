//! Command-line options of `stoa bench` and the workload of one run (a
//! "cell" of a benchmark matrix).

use std::path::PathBuf;
use std::time::Duration;

use crate::mix::Mix;

pub const USAGE: &str = "usage: stoa bench [options]
  --servers host:port[,..]   servers to drive (default 127.0.0.1:2181)
  --sessions N               client sessions (default 1)
  --outstanding K            calls in flight per session; 1 = synchronous (default 1)
  --mix op=w,..              weights of create, set, get, exists, children, delete, multi
  --read-ratio R             R % get, the rest set (instead of --mix; default 50)
  --payload BYTES            data size of keys and writes (default 100)
  --keys N                   keyspace size, created before measuring (default 1000)
  --duration SECS            measured time (default 5), or
  --ops N                    measured operations (all sessions together)
  --warmup SECS              unmeasured load before measuring (default 1)
  --rate OPS                 offered load in ops/s over all sessions (default: closed loop);
                             latency then counts from the scheduled start
  --ephemeral                creates make ephemeral nodes
  --scenario NAME            a named experiment: create-sync, create-async, ephemeral-300b,
                             producer-consumer, read-ratio-sweep, payload-sweep; EZK's
                             pq-extension, pq-recipe, quota-extension, quota-recipe
                             (1..32 synchronous clients, or --sessions N for one count)
  --queue-depth N            priority-queue scenarios: elements the producer keeps queued
                             (default 100)
  --backoff-ms MS            quota scenarios: pause after a refusal for lack of quota
                             (default 1)
  --label TEXT               name of this run in the outputs
  --json FILE                write the results as JSON
  --csv FILE                 append one line per result
  --server-pid PID           also report the server's CPU time per op (Linux, same machine)
  --threads N                load generator threads (default 1: one current-thread runtime)
  --quiet                    no table on stdout";

/// What one measured run does.
#[derive(Debug, Clone)]
pub struct Cell {
    pub label: String,
    pub sessions: usize,
    pub outstanding: usize,
    pub mix: Mix,
    pub payload_bytes: usize,
    pub keys: usize,
    pub duration: Duration,
    /// Measured operations; when set, `duration` is ignored.
    pub ops: Option<u64>,
    pub warmup: Duration,
    /// Offered load over all sessions; `None` is closed loop.
    pub rate_ops_s: Option<f64>,
    pub ephemeral: bool,
    /// Server process whose CPU time per op to report.
    pub server_pid: Option<u32>,
    /// What the sessions do: the op mix, or one of the EZK experiments.
    pub workload: Workload,
    /// EZK quota scenarios: pause after a refusal for lack of quota.
    pub backoff: Duration,
    /// EZK priority-queue scenarios: elements the producer keeps queued.
    pub queue_depth: usize,
}

/// What a cell's sessions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workload {
    /// Calls picked from `Cell::mix`.
    #[default]
    Mix,
    /// EZK priority queue, server side: `getData /queue/next`.
    PqExtension,
    /// EZK priority queue, client side: getChildren, getData, delete.
    PqRecipe,
    /// EZK quota, server side: `setData /memory-quota`.
    QuotaExtension,
    /// EZK quota, client side: getData, versioned setData.
    QuotaRecipe,
}

impl Workload {
    pub fn is_ezk(self) -> bool {
        self != Workload::Mix
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Mix => "mix",
            Workload::PqExtension => "pq-extension",
            Workload::PqRecipe => "pq-recipe",
            Workload::QuotaExtension => "quota-extension",
            Workload::QuotaRecipe => "quota-recipe",
        }
    }
}

/// Everything on the command line, unset flags as `None` so scenarios can
/// supply their own defaults.
#[derive(Debug, Clone, Default)]
pub struct Args {
    pub servers: Option<String>,
    pub sessions: Option<usize>,
    pub outstanding: Option<usize>,
    pub mix: Option<Mix>,
    pub payload_bytes: Option<usize>,
    pub keys: Option<usize>,
    pub duration: Option<Duration>,
    pub ops: Option<u64>,
    pub warmup: Option<Duration>,
    pub rate_ops_s: Option<f64>,
    pub ephemeral: bool,
    pub scenario: Option<String>,
    pub label: Option<String>,
    pub json: Option<PathBuf>,
    pub csv: Option<PathBuf>,
    pub quiet: bool,
    pub server_pid: Option<u32>,
    pub threads: Option<usize>,
    pub backoff: Option<Duration>,
    pub queue_depth: Option<usize>,
}

/// Upper bounds that keep a typo from launching an unbounded run.
const SESSIONS_MAX: usize = 10_000;
const OUTSTANDING_MAX: usize = 100_000;
const PAYLOAD_BYTES_MAX: usize = 1 << 20;
const KEYS_MAX: usize = 10_000_000;
const THREADS_MAX: usize = 256;

impl Args {
    pub fn parse(args: &[String]) -> Result<Args, String> {
        let mut out = Args::default();
        let mut i = 0;
        while i < args.len() {
            let flag = args[i].as_str();
            match flag {
                "--ephemeral" => {
                    out.ephemeral = true;
                    i += 1;
                    continue;
                }
                "--quiet" => {
                    out.quiet = true;
                    i += 1;
                    continue;
                }
                _ => {}
            }
            let value = args
                .get(i + 1)
                .ok_or_else(|| format!("{flag} needs a value"))?
                .as_str();
            match flag {
                "--servers" => out.servers = Some(value.to_owned()),
                "--sessions" => out.sessions = Some(count(flag, value, 1, SESSIONS_MAX)?),
                "--outstanding" => out.outstanding = Some(count(flag, value, 1, OUTSTANDING_MAX)?),
                "--mix" => out.mix = Some(Mix::parse(value)?),
                "--read-ratio" => {
                    let r = count(flag, value, 0, 100)?;
                    out.mix = Some(Mix::read_ratio(r as u32)?);
                }
                "--payload" => out.payload_bytes = Some(count(flag, value, 0, PAYLOAD_BYTES_MAX)?),
                "--keys" => out.keys = Some(count(flag, value, 1, KEYS_MAX)?),
                "--duration" => out.duration = Some(seconds(flag, value)?),
                "--ops" => out.ops = Some(count(flag, value, 1, usize::MAX)? as u64),
                "--warmup" => out.warmup = Some(seconds(flag, value)?),
                "--rate" => {
                    let r: f64 = value
                        .parse()
                        .map_err(|_| format!("{flag} expects ops/s, got {value:?}"))?;
                    if !(r > 0.0 && r.is_finite()) {
                        return Err(format!("{flag} must be above 0"));
                    }
                    out.rate_ops_s = Some(r);
                }
                "--server-pid" => {
                    out.server_pid = Some(
                        value
                            .parse()
                            .map_err(|_| format!("{flag} expects a process id, got {value:?}"))?,
                    )
                }
                "--threads" => out.threads = Some(count(flag, value, 1, THREADS_MAX)?),
                "--queue-depth" => out.queue_depth = Some(count(flag, value, 1, 100_000)?),
                "--backoff-ms" => {
                    let ms: f64 = value
                        .parse()
                        .map_err(|_| format!("{flag} expects milliseconds, got {value:?}"))?;
                    if !(0.0..=60_000.0).contains(&ms) {
                        return Err(format!("{flag} must be between 0 and 60000"));
                    }
                    out.backoff = Some(Duration::from_secs_f64(ms / 1000.0));
                }
                "--scenario" => out.scenario = Some(value.to_owned()),
                "--label" => out.label = Some(value.to_owned()),
                "--json" => out.json = Some(PathBuf::from(value)),
                "--csv" => out.csv = Some(PathBuf::from(value)),
                _ => return Err(format!("unknown option {flag}")),
            }
            i += 2;
        }
        Ok(out)
    }

    pub fn servers(&self) -> String {
        self.servers
            .clone()
            .unwrap_or_else(|| "127.0.0.1:2181".to_owned())
    }

    /// The single run the flags describe (no scenario).
    pub fn cell(&self) -> Cell {
        Cell {
            label: self.label.clone().unwrap_or_else(|| "bench".to_owned()),
            sessions: self.sessions.unwrap_or(1),
            outstanding: self.outstanding.unwrap_or(1),
            mix: self
                .mix
                .clone()
                .unwrap_or_else(|| Mix::read_ratio(50).expect("50 is a valid read ratio")),
            payload_bytes: self.payload_bytes.unwrap_or(100),
            keys: self.keys.unwrap_or(1000),
            duration: self.duration.unwrap_or(Duration::from_secs(5)),
            ops: self.ops,
            warmup: self.warmup.unwrap_or(Duration::from_secs(1)),
            rate_ops_s: self.rate_ops_s,
            ephemeral: self.ephemeral,
            server_pid: self.server_pid,
            workload: Workload::Mix,
            backoff: self.backoff.unwrap_or(Duration::from_millis(1)),
            queue_depth: self.queue_depth.unwrap_or(100),
        }
    }
}

fn count(flag: &str, value: &str, min: usize, max: usize) -> Result<usize, String> {
    let n: usize = value
        .parse()
        .map_err(|_| format!("{flag} expects a whole number, got {value:?}"))?;
    if n < min || n > max {
        return Err(format!("{flag} must be between {min} and {max}, got {n}"));
    }
    Ok(n)
}

fn seconds(flag: &str, value: &str) -> Result<Duration, String> {
    let s: f64 = value
        .parse()
        .map_err(|_| format!("{flag} expects seconds, got {value:?}"))?;
    if !(0.0..=86_400.0).contains(&s) {
        return Err(format!("{flag} must be between 0 and 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Args, String> {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        Args::parse(&args)
    }

    #[test]
    fn flags_fill_the_cell() {
        let args = parse(
            "--sessions 4 --outstanding 8 --read-ratio 90 --payload 8 --duration 0.5 --ephemeral",
        )
        .unwrap();
        let cell = args.cell();
        assert_eq!(
            (cell.sessions, cell.outstanding, cell.payload_bytes),
            (4, 8, 8)
        );
        assert_eq!(cell.mix.to_string(), "set=10,get=90");
        assert_eq!(cell.duration, Duration::from_millis(500));
        assert!(cell.ephemeral);
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(parse("--sessions 0").is_err());
        assert!(parse("--sessions").is_err());
        assert!(parse("--duration -1").is_err());
        assert!(parse("--rate 0").is_err());
        assert!(parse("--frob 1").is_err());
    }
}

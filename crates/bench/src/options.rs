//! Command-line options of `stoa bench` and the workload of one run (a
//! "cell" of a benchmark matrix).

use std::path::PathBuf;
use std::time::Duration;

use crate::mix::Mix;
use crate::prim::Primitive;

pub const USAGE: &str = "usage: stoa bench [options]
  --target zookeeper|etcd|file
                             protocol to drive: ZooKeeper's (Apache ZooKeeper, Stoa;
                             the default) or etcd's v3 gRPC API; `file` drives no server:
                             each call writes its payload into a preallocated file in
                             --dir and fdatasyncs it, one synchronous writer (the floor
                             under any durable write on that disk)
  --servers host:port[,..]   ZooKeeper-protocol servers to drive (default 127.0.0.1:2181);
                             session i tries server i mod n first, so the sessions spread
                             over the members of an ensemble
  --mounts TABLE             sessions are composed clients (ZooNet's Algorithm 1, the Rust
                             client's ComposedClient) over several ensembles, each mounted
                             at a path prefix: `/a=h1:p,h2:p;/b=h3:p` (instead of
                             --servers; docs/compose.md); --root picks the mounts the
                             keyspace lies under
  --endpoints host:port[,..] --target etcd: etcd members (default 127.0.0.1:2379); a session
                             is one client connection, session i on endpoint i mod n.
                             create/set are puts, get/exists linearizable ranges
                             (serializable=false), children a keys-only prefix range,
                             delete a delete, multi a txn of two puts, --ephemeral a lease
  --dir DIR                  --target file: where the file goes (the disk to measure)
  --serializable             --target etcd: serializable reads (answered from the member's
                             local state) instead of linearizable ones (etcd's default)
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
  --fast WORDS               Stoa: every session opts into fast reads and/or fast watches
                             (WORDS: reads, watches, or reads,watches) before the run, by
                             its ephemeral /zookeeper/fast/<session id> (docs/partitions.md)
  --root PATH[,PATH..]       where the keyspace and the creates go (default /stoa-bench):
                             one load generator per group drives a server of several
                             partitions (partition.groups); several roots spread the
                             keyspace over them (key i under root i mod n)
  --burst N                  with several roots: calls a session makes under one root
                             before it moves to the next (default 0: keys at random
                             over all roots), its calls in flight taking turns; a
                             session switches partitions every N calls
  --clean-up                 once measured, delete what the run's creates left (not
                             counted in any figure): the next run finds the tree as
                             this one did
  --scenario NAME            a named experiment: create-sync, create-async (100,000 creates
                             unless --duration), ephemeral-300b (10,000),
                             producer-consumer, read-ratio-sweep, payload-sweep; EZK's
                             pq-extension, pq-recipe, quota-extension, quota-recipe
                             (1..32 synchronous clients, or --sessions N for one count;
                             ZooKeeper protocol only); the Cost of Consensus locks
                             prim-lock-tas, prim-lock-tas-async, prim-lock-queue,
                             prim-lock-queue-async, prim-lock-server (Stoa's fifo_lock.lua),
                             and prim-locks (the client-side four, then the server's)
  --queue-depth N            priority-queue scenarios: elements the producer keeps queued
                             (default 100)
  --think-ms MS              lock scenarios (prim-lock-*): each client's mean think time
                             between a release and its next request, exponential
                             (default 500; N clients offer N / think requests per second)
  --hold-ms MS               lock scenarios: mean critical section, exponential (default 1)
  --poll-ms MS               prim-lock-tas-async: interval between its creates (default 5)
  --lock-trace FILE          lock scenarios: write one line per measured acquisition,
                             `client began granted release_sent released` (µs from the
                             end of the warm-up), to tell a lock's own cost from queueing
  --backoff-ms MS            quota scenarios: pause after a refusal for lack of quota
                             (default 1)
  --label TEXT               name of this run in the outputs
  --json FILE                write the results as JSON
  --csv FILE                 append one line per result
  --server-pid PID[,..]      also report the server's CPU time per op (Linux, same machine;
                             several PIDs: the members of an ensemble, summed)
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
    /// Delete what the creates left once the run is measured.
    pub clean_up: bool,
    /// Server processes (an ensemble's members) whose CPU time per op to
    /// report, summed; empty for none.
    pub server_pids: Vec<u32>,
    /// What the sessions do: the op mix, or one of the EZK experiments.
    pub workload: Workload,
    /// EZK quota scenarios: pause after a refusal for lack of quota.
    pub backoff: Duration,
    /// EZK priority-queue scenarios: elements the producer keeps queued.
    pub queue_depth: usize,
    /// `--burst`: calls under one root before the next (0: at random).
    pub burst: usize,
    /// Which protocol the sessions speak.
    pub target: Target,
    /// etcd: reads with `serializable = true` (not linearizable).
    pub serializable: bool,
    /// Lock scenarios: mean think time between requests (exponential).
    pub think: Duration,
    /// Lock scenarios: mean critical section (exponential).
    pub hold: Duration,
    /// prim-lock-tas-async: interval between its creates.
    pub poll: Duration,
    /// Lock scenarios: where each acquisition's timestamps go.
    pub lock_trace: Option<PathBuf>,
    /// Stoa: what every session opts into (`/zookeeper/fast`'s words).
    pub fast: Option<String>,
    /// The sessions are composed clients over the mount table the run's
    /// servers string holds (`--mounts`).
    pub composed: bool,
}

/// The protocol a run speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Target {
    /// ZooKeeper's client protocol, through `stoa-client` (Apache
    /// ZooKeeper, Stoa).
    #[default]
    ZooKeeper,
    /// etcd's v3 gRPC API (`crate::etcd`).
    Etcd,
    /// No server: a raw fsynced file write per call (`crate::file`).
    File,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::ZooKeeper => "zookeeper",
            Target::Etcd => "etcd",
            Target::File => "file",
        }
    }

    fn parse(text: &str) -> Result<Target, String> {
        match text {
            "zookeeper" | "zk" | "stoa" => Ok(Target::ZooKeeper),
            "etcd" => Ok(Target::Etcd),
            "file" => Ok(Target::File),
            _ => Err(format!("unknown --target {text:?} (zookeeper, etcd, file)")),
        }
    }
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
    /// The Cost of Consensus lock experiments (`crate::prim`).
    Lock(Primitive),
}

impl Workload {
    pub fn is_ezk(self) -> bool {
        !matches!(self, Workload::Mix | Workload::Lock(_))
    }

    pub fn lock(self) -> Option<Primitive> {
        match self {
            Workload::Lock(p) => Some(p),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::Mix => "mix",
            Workload::PqExtension => "pq-extension",
            Workload::PqRecipe => "pq-recipe",
            Workload::QuotaExtension => "quota-extension",
            Workload::QuotaRecipe => "quota-recipe",
            Workload::Lock(Primitive::Tas) => "prim-lock-tas",
            Workload::Lock(Primitive::TasAsync) => "prim-lock-tas-async",
            Workload::Lock(Primitive::Queue) => "prim-lock-queue",
            Workload::Lock(Primitive::QueueAsync) => "prim-lock-queue-async",
            Workload::Lock(Primitive::Server) => "prim-lock-server",
        }
    }
}

/// Everything on the command line, unset flags as `None` so scenarios can
/// supply their own defaults.
#[derive(Debug, Clone, Default)]
pub struct Args {
    pub target: Option<Target>,
    pub servers: Option<String>,
    pub mounts: Option<String>,
    pub endpoints: Option<String>,
    pub dir: Option<PathBuf>,
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
    pub clean_up: bool,
    pub serializable: bool,
    pub scenario: Option<String>,
    pub label: Option<String>,
    /// `--root`: where the mixes' nodes go.
    pub root: Option<String>,
    pub json: Option<PathBuf>,
    pub csv: Option<PathBuf>,
    pub quiet: bool,
    pub server_pids: Vec<u32>,
    pub threads: Option<usize>,
    pub backoff: Option<Duration>,
    pub queue_depth: Option<usize>,
    pub burst: Option<usize>,
    pub think: Option<Duration>,
    pub hold: Option<Duration>,
    pub poll: Option<Duration>,
    pub lock_trace: Option<PathBuf>,
    /// Stoa: what every session opts into (`/zookeeper/fast`'s words).
    pub fast: Option<String>,
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
                "--clean-up" => {
                    out.clean_up = true;
                    i += 1;
                    continue;
                }
                "--quiet" => {
                    out.quiet = true;
                    i += 1;
                    continue;
                }
                "--serializable" => {
                    out.serializable = true;
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
                "--target" => out.target = Some(Target::parse(value)?),
                "--servers" => out.servers = Some(value.to_owned()),
                "--mounts" => out.mounts = Some(value.to_owned()),
                "--endpoints" => out.endpoints = Some(value.to_owned()),
                "--fast" => {
                    let words = value.split(',').filter(|w| !w.is_empty());
                    if let Some(bad) = words.clone().find(|w| !["reads", "watches"].contains(w)) {
                        return Err(format!("{flag}: {bad:?} is neither reads nor watches"));
                    }
                    out.fast = Some(words.collect::<Vec<_>>().join(","));
                }
                "--dir" => out.dir = Some(PathBuf::from(value)),
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
                    out.server_pids = value
                        .split(',')
                        .map(|pid| {
                            pid.trim()
                                .parse()
                                .map_err(|_| format!("{flag} expects process ids, got {value:?}"))
                        })
                        .collect::<Result<_, _>>()?
                }
                "--threads" => out.threads = Some(count(flag, value, 1, THREADS_MAX)?),
                "--queue-depth" => out.queue_depth = Some(count(flag, value, 1, 100_000)?),
                "--burst" => out.burst = Some(count(flag, value, 1, 1_000_000)?),
                "--backoff-ms" => {
                    let ms: f64 = value
                        .parse()
                        .map_err(|_| format!("{flag} expects milliseconds, got {value:?}"))?;
                    if !(0.0..=60_000.0).contains(&ms) {
                        return Err(format!("{flag} must be between 0 and 60000"));
                    }
                    out.backoff = Some(Duration::from_secs_f64(ms / 1000.0));
                }
                "--think-ms" => out.think = Some(millis(flag, value, 0.0)?),
                "--hold-ms" => out.hold = Some(millis(flag, value, 0.0)?),
                "--poll-ms" => out.poll = Some(millis(flag, value, 1.0)?),
                "--scenario" => out.scenario = Some(value.to_owned()),
                "--label" => out.label = Some(value.to_owned()),
                "--root" => out.root = Some(value.to_owned()),
                "--json" => out.json = Some(PathBuf::from(value)),
                "--csv" => out.csv = Some(PathBuf::from(value)),
                "--lock-trace" => out.lock_trace = Some(PathBuf::from(value)),
                _ => return Err(format!("unknown option {flag}")),
            }
            i += 2;
        }
        match out.target.unwrap_or_default() {
            Target::Etcd if out.servers.is_some() => {
                return Err(
                    "--servers names ZooKeeper-protocol servers; etcd's are --endpoints".into(),
                )
            }
            Target::ZooKeeper | Target::File if out.endpoints.is_some() || out.serializable => {
                return Err("--endpoints and --serializable are for --target etcd".into())
            }
            Target::File => {
                if out.dir.is_none() || out.servers.is_some() || out.scenario.is_some() {
                    return Err("--target file needs --dir (no --servers, no --scenario)".into());
                }
                if out.sessions.unwrap_or(1) * out.outstanding.unwrap_or(1) != 1
                    || out.rate_ops_s.is_some()
                {
                    return Err("--target file measures one synchronous writer: \
                                --sessions 1 --outstanding 1, closed loop"
                        .into());
                }
            }
            _ => {}
        }
        if out.mounts.is_some()
            && (out.servers.is_some()
                || out.scenario.is_some()
                || out.fast.is_some()
                || out.target.unwrap_or_default() != Target::ZooKeeper)
        {
            return Err(
                "--mounts replaces --servers for the ZooKeeper protocol's mixes \
                        (no --scenario, no --fast)"
                    .into(),
            );
        }
        if out.dir.is_some() && out.target != Some(Target::File) {
            return Err("--dir is for --target file".into());
        }
        Ok(out)
    }

    /// Where the runs go: `--servers`, or `--endpoints` for etcd.
    pub fn servers(&self) -> String {
        match self.target.unwrap_or_default() {
            Target::ZooKeeper => (self.mounts.clone())
                .or_else(|| self.servers.clone())
                .unwrap_or_else(|| "127.0.0.1:2181".to_owned()),
            Target::Etcd => self
                .endpoints
                .clone()
                .unwrap_or_else(|| crate::etcd::DEFAULT_ENDPOINT.to_owned()),
            Target::File => self
                .dir
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        }
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
            clean_up: self.clean_up,
            server_pids: self.server_pids.clone(),
            workload: Workload::Mix,
            backoff: self.backoff.unwrap_or(Duration::from_millis(1)),
            queue_depth: self.queue_depth.unwrap_or(100),
            burst: self.burst.unwrap_or(0),
            target: self.target.unwrap_or_default(),
            serializable: self.serializable,
            think: self.think.unwrap_or(Duration::from_millis(500)),
            hold: self.hold.unwrap_or(Duration::from_millis(1)),
            poll: self.poll.unwrap_or(Duration::from_millis(5)),
            lock_trace: self.lock_trace.clone(),
            fast: self.fast.clone(),
            composed: self.mounts.is_some(),
        }
    }
}

/// Milliseconds between `min` and an hour.
fn millis(flag: &str, value: &str, min: f64) -> Result<Duration, String> {
    let ms: f64 = value
        .parse()
        .map_err(|_| format!("{flag} expects milliseconds, got {value:?}"))?;
    if !(min..=3_600_000.0).contains(&ms) {
        return Err(format!("{flag} must be between {min} and 3600000"));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
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
            "--sessions 4 --outstanding 8 --read-ratio 90 --payload 8 --duration 0.5 --ephemeral \
             --clean-up",
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
        assert!(cell.clean_up);
        assert!(!parse("").unwrap().cell().clean_up);
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(parse("--sessions 0").is_err());
        assert!(parse("--sessions").is_err());
        assert!(parse("--duration -1").is_err());
        assert!(parse("--rate 0").is_err());
        assert!(parse("--frob 1").is_err());
        assert!(parse("--target redis").is_err());
        assert!(parse("--endpoints 127.0.0.1:2379").is_err());
        assert!(parse("--target etcd --servers 127.0.0.1:2181").is_err());
        assert!(parse("--serializable").is_err());
        let fast = |v: &str| parse(&format!("--fast {v}")).map(|a| a.cell().fast);
        assert_eq!(fast("watches,reads"), Ok(Some("watches,reads".into())));
        assert!(fast("reads,all").is_err());
        assert!(parse("--server-pid 1,x").is_err());
    }

    #[test]
    fn server_pids_are_a_list() {
        assert_eq!(parse("--server-pid 7").unwrap().cell().server_pids, [7]);
        assert_eq!(
            parse("--server-pid 7,8,9").unwrap().cell().server_pids,
            [7, 8, 9]
        );
        assert!(parse("").unwrap().cell().server_pids.is_empty());
    }

    #[test]
    fn etcd_target_and_endpoints() {
        let args = parse("--target etcd --endpoints 127.0.0.1:23790 --sessions 2").unwrap();
        assert_eq!(args.servers(), "127.0.0.1:23790");
        assert_eq!(args.cell().target, Target::Etcd);
        assert!(!args.cell().serializable);
        assert!(
            parse("--target etcd --serializable")
                .unwrap()
                .cell()
                .serializable
        );
        assert_eq!(parse("--target etcd").unwrap().servers(), "127.0.0.1:2379");
        assert_eq!(parse("").unwrap().servers(), "127.0.0.1:2181");
        assert_eq!(parse("").unwrap().cell().target, Target::ZooKeeper);
    }

    #[test]
    fn the_file_target_is_one_synchronous_writer_in_a_directory() {
        let args = parse("--target file --dir /tmp/x --payload 100").unwrap();
        assert_eq!(
            (args.cell().target, args.servers()),
            (Target::File, "/tmp/x".into())
        );
        assert!(parse("--target file").is_err());
        assert!(parse("--target file --dir /tmp/x --outstanding 2").is_err());
        assert!(parse("--target file --dir /tmp/x --sessions 2").is_err());
        assert!(parse("--target file --dir /tmp/x --rate 10").is_err());
        assert!(parse("--target file --dir /tmp/x --servers a:1").is_err());
        assert!(parse("--dir /tmp/x").is_err());
    }

    #[test]
    fn mounts_replace_the_servers_for_composed_sessions() {
        let table = "/a=127.0.0.1:2191;/b=127.0.0.1:2192,127.0.0.1:2193";
        let args = parse(&format!("--mounts {table} --root /b --sessions 2")).unwrap();
        assert_eq!(args.servers(), table);
        assert!(args.cell().composed);
        assert!(!parse("").unwrap().cell().composed);
        for other in [
            "--servers a:1",
            "--scenario create-sync",
            "--fast reads",
            "--target etcd",
        ] {
            assert!(
                parse(&format!("--mounts {table} {other}")).is_err(),
                "--mounts with {other}"
            );
        }
    }
}

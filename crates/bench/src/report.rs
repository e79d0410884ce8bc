//! Results of a run and their three renderings: a table for people, JSON
//! for scripts (`scripts/bench-compare`), CSV lines to append to.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::driver::new_histogram;
use crate::ezk::EzkStats;
use crate::mix::OpKind;
use crate::options::{Cell, Target};
use crate::prim::PrimStats;

/// Latency figures in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl Latency {
    pub(crate) fn of(h: &Histogram<u64>) -> Latency {
        Latency {
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: h.mean(),
        }
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "p50": self.p50_us, "p90": self.p90_us, "p99": self.p99_us,
            "p999": self.p999_us, "max": self.max_us, "mean": self.mean_us,
        })
    }
}

/// CPU seconds spent over the measured window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuUse {
    /// The server process (`--server-pid`).
    pub server_s: Option<f64>,
    /// This load generator.
    pub client_s: Option<f64>,
}

/// The figures of a scenario that are its own.
pub enum ScenarioStats {
    Ezk(EzkStats),
    Prim(PrimStats),
}

#[derive(Debug, Clone)]
pub struct CellResult {
    pub cell: Cell,
    pub servers: String,
    pub elapsed: Duration,
    /// Calls answered without error in the measured window.
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub latency: Latency,
    /// (op, calls, latency) for each op kind that ran.
    pub by_op: Vec<(OpKind, u64, Latency)>,
    pub cpu: CpuUse,
    /// The EZK scenarios' own figures (dequeues, calls per operation).
    pub ezk: Option<EzkStats>,
    /// The lock scenarios' own figures (acquisitions, acquire latency).
    pub prim: Option<PrimStats>,
}

impl CellResult {
    pub fn new(
        cell: &Cell,
        servers: &str,
        elapsed: Duration,
        ok: u64,
        errors: BTreeMap<String, u64>,
        by_op: Vec<Histogram<u64>>,
        cpu: CpuUse,
    ) -> CellResult {
        let mut all = new_histogram();
        for h in &by_op {
            all.add(h).expect("histograms share bounds");
        }
        CellResult {
            cell: cell.clone(),
            servers: servers.to_owned(),
            elapsed,
            ok,
            errors,
            latency: Latency::of(&all),
            by_op: OpKind::ALL
                .iter()
                .zip(&by_op)
                .filter(|(_, h)| !h.is_empty())
                .map(|(k, h)| (*k, h.len(), Latency::of(h)))
                .collect(),
            cpu,
            ezk: None,
            prim: None,
        }
    }

    /// A scenario's result with figures of its own: an EZK scenario's
    /// (`ok` counts logical operations, dequeues, allocations and
    /// releases, `latency` theirs, retries included) or a lock scenario's
    /// (`ok` counts acquisitions, `latency` is their acquire latency,
    /// request to grant).
    #[allow(clippy::too_many_arguments)]
    pub fn of_scenario(
        cell: &Cell,
        servers: &str,
        elapsed: Duration,
        ok: u64,
        errors: BTreeMap<String, u64>,
        latency: Latency,
        cpu: CpuUse,
        stats: ScenarioStats,
    ) -> CellResult {
        let (ezk, prim) = match stats {
            ScenarioStats::Ezk(ezk) => (Some(ezk), None),
            ScenarioStats::Prim(prim) => (None, Some(prim)),
        };
        CellResult {
            cell: cell.clone(),
            servers: servers.to_owned(),
            elapsed,
            ok,
            errors,
            latency,
            by_op: Vec::new(),
            cpu,
            ezk,
            prim,
        }
    }

    /// CPU microseconds per successful call, of `cpu_s` seconds.
    fn per_op_us(&self, cpu_s: Option<f64>) -> Option<f64> {
        cpu_s
            .filter(|_| self.ok > 0)
            .map(|s| s * 1e6 / self.ok as f64)
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Successful calls per second of the measured window.
    pub fn throughput_ops_s(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ok as f64 / secs
        } else {
            0.0
        }
    }

    pub fn json(&self) -> Value {
        let c = &self.cell;
        let by_op: serde_json::Map<String, Value> = self
            .by_op
            .iter()
            .map(|(k, n, l)| {
                (
                    k.name().to_owned(),
                    json!({"ops": n, "latency_us": l.json()}),
                )
            })
            .collect();
        let mut v = json!({
            "label": c.label,
            "target": c.target.name(),
            "servers": self.servers,
            "sessions": c.sessions,
            "outstanding": c.outstanding,
            "mix": c.mix.to_string(),
            "payload_bytes": c.payload_bytes,
            "keys": c.keys,
            "ephemeral": c.ephemeral,
            "rate_ops_s": c.rate_ops_s,
            "warmup_s": c.warmup.as_secs_f64(),
            "elapsed_s": self.elapsed.as_secs_f64(),
            "ops": self.ok,
            "error_count": self.error_count(),
            "errors": self.errors,
            "throughput_ops_s": self.throughput_ops_s(),
            "latency_us": self.latency.json(),
            "by_op": by_op,
            "server_cpu_us_per_op": self.per_op_us(self.cpu.server_s),
            "client_cpu_us_per_op": self.per_op_us(self.cpu.client_s),
        });
        if c.target == Target::Etcd {
            v["serializable"] = json!(c.serializable);
        }
        if let Some(fast) = &c.fast {
            v["fast"] = json!(fast);
        }
        if let Some(ezk) = &self.ezk {
            v["ezk"] = ezk.json(self.elapsed);
        }
        if let Some(prim) = &self.prim {
            v["prim"] = prim.json(self.elapsed);
        }
        v
    }

    fn csv_line(&self) -> String {
        let c = &self.cell;
        let l = &self.latency;
        format!(
            "{},{},{},{},\"{}\",{},{},{},{},{},{:.3},{:.1},{},{},{},{},{}",
            c.label,
            self.servers,
            c.sessions,
            c.outstanding,
            c.mix,
            c.payload_bytes,
            c.keys,
            c.rate_ops_s.map(|r| format!("{r:.0}")).unwrap_or_default(),
            self.ok,
            self.error_count(),
            self.elapsed.as_secs_f64(),
            self.throughput_ops_s(),
            l.p50_us,
            l.p99_us,
            l.p999_us,
            l.max_us,
            self.per_op_us(self.cpu.server_s)
                .map(|us| format!("{us:.2}"))
                .unwrap_or_default()
        )
    }
}

const CSV_HEADER: &str = "label,servers,sessions,outstanding,mix,payload_bytes,keys,rate_ops_s,ops,errors,elapsed_s,throughput_ops_s,p50_us,p99_us,p999_us,max_us,server_cpu_us_per_op";

pub fn write_json(path: &Path, results: &[CellResult]) -> Result<(), String> {
    let doc = json!({ "results": results.iter().map(CellResult::json).collect::<Vec<_>>() });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

pub fn append_csv(path: &Path, results: &[CellResult]) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(fail)?;
    let mut text = String::new();
    if file.metadata().map_err(fail)?.len() == 0 {
        text.push_str(CSV_HEADER);
        text.push('\n');
    }
    for r in results {
        text.push_str(&r.csv_line());
        text.push('\n');
    }
    file.write_all(text.as_bytes()).map_err(fail)
}

fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

/// The human-readable table: one line per run, one indented line per op
/// kind when the mix has several.
pub fn table(results: &[CellResult]) -> String {
    let mut out = format!(
        "{:<28} {:>9} {:>11} {:>9} {:>9} {:>9} {:>9}  errors\n",
        "run", "sess x K", "ops/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    for r in results {
        let l = &r.latency;
        let errors = if r.errors.is_empty() {
            "0".to_owned()
        } else {
            r.errors
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push_str(&format!(
            "{:<28} {:>9} {:>11.0} {:>9} {:>9} {:>9} {:>9}  {}\n",
            r.cell.label,
            format!("{}x{}", r.cell.sessions, r.cell.outstanding),
            r.throughput_ops_s(),
            ms(l.p50_us),
            ms(l.p99_us),
            ms(l.p999_us),
            ms(l.max_us),
            errors
        ));
        if let Some(ezk) = &r.ezk {
            out.push_str(&ezk.summary(r.elapsed));
        }
        if let Some(prim) = &r.prim {
            out.push_str(&prim.summary(r.elapsed));
        }
        if let Some(us) = r.per_op_us(r.cpu.server_s) {
            out.push_str(&format!("  server cpu {us:.2} us/op"));
            if let Some(client) = r.per_op_us(r.cpu.client_s) {
                out.push_str(&format!(", load generator cpu {client:.2} us/op"));
            }
            out.push('\n');
        }
        if r.by_op.len() > 1 {
            for (kind, n, l) in &r.by_op {
                out.push_str(&format!(
                    "  {:<26} {:>9} {:>11} {:>9} {:>9} {:>9} {:>9}\n",
                    kind.name(),
                    "",
                    format!("{n} ops"),
                    ms(l.p50_us),
                    ms(l.p99_us),
                    ms(l.p999_us),
                    ms(l.max_us)
                ));
            }
        }
    }
    out
}

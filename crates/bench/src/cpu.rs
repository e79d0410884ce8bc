//! CPU time of a process from /proc (Linux): how much CPU the server and
//! the load generator spend per operation, a figure the 2-core machines
//! cannot blur the way they blur throughput.

/// User + system CPU seconds `pid` has used, or `None` off Linux or when
/// the process is gone.
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    read_stat(&format!("/proc/{pid}/stat"))
}

/// User + system CPU seconds of every process in `pids` together (the
/// members of an ensemble), or `None` when there is none or one is gone.
pub fn processes_cpu_s(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|&pid| process_cpu_s(pid)).sum()
}

/// CPU seconds the servers and this process used since the samples taken
/// at the start of a measured window.
pub fn used_since(
    server_pids: &[u32],
    server_start: Option<f64>,
    client_start: Option<f64>,
) -> crate::report::CpuUse {
    crate::report::CpuUse {
        server_s: server_start
            .zip(processes_cpu_s(server_pids))
            .map(|(a, b)| b - a),
        client_s: client_start.zip(own_cpu_s()).map(|(a, b)| b - a),
    }
}

/// The CPU used over a measured window: sampled when it starts (by a task
/// of its own, at `start`) and again once every client's result is in.
pub struct Window {
    server_pids: Vec<u32>,
    at_start: stoa_client::tokio::task::JoinHandle<(Option<f64>, Option<f64>)>,
}

impl Window {
    pub fn starting_at(start: std::time::Instant, server_pids: &[u32]) -> Window {
        let pids = server_pids.to_vec();
        let at_start = stoa_client::tokio::spawn(async move {
            stoa_client::tokio::time::sleep_until(start.into()).await;
            (processes_cpu_s(&pids), own_cpu_s())
        });
        Window {
            server_pids: server_pids.to_vec(),
            at_start,
        }
    }

    /// Every client's result (`what` names them in an error), then the CPU
    /// the servers and this process used since the window began.
    pub async fn gather<T>(
        self,
        clients: Vec<stoa_client::tokio::task::JoinHandle<T>>,
        what: &str,
    ) -> Result<(Vec<T>, crate::report::CpuUse), String> {
        let mut results = Vec::with_capacity(clients.len());
        for client in clients {
            results.push(client.await.map_err(|e| format!("{what} failed: {e}"))?);
        }
        let (server_start, client_start) = self
            .at_start
            .await
            .map_err(|e| format!("cpu sampler failed: {e}"))?;
        Ok((
            results,
            used_since(&self.server_pids, server_start, client_start),
        ))
    }
}

pub fn own_cpu_s() -> Option<f64> {
    read_stat("/proc/self/stat")
}

/// Clock ticks per second of /proc's times; 100 on every Linux we run on.
const TICKS_PER_S: f64 = 100.0;

fn read_stat(path: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_stat(&text)
}

/// utime and stime are fields 14 and 15, counted after the `(comm)` field,
/// which may itself hold spaces.
fn parse_stat(text: &str) -> Option<f64> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utime_and_stime_after_a_comm_with_spaces() {
        let line = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(parse_stat(line), Some(3.0));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn own_cpu_is_readable_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(own_cpu_s().is_some());
            let me = std::process::id();
            assert!(processes_cpu_s(&[me, me]).is_some());
        }
        assert_eq!(processes_cpu_s(&[]), None);
    }
}

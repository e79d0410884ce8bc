//! Prometheus text exposition over HTTP (`GET /metrics`). Metric names are
//! ZooKeeper's Prometheus names: the `mntr` keys without their `zk_` prefix,
//! so existing dashboards keep working.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// A scrape asks the engine loop for the current text.
pub type ScrapeRequest = oneshot::Sender<String>;

/// Bytes of an HTTP request head we read before answering.
const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;

/// Renders `mntr` rows (`zk_name\tvalue`) as Prometheus gauges; rows whose
/// value is not a number (the version, the state) become labels of `info`.
pub fn render(mntr: &str) -> String {
    let mut out = String::new();
    let mut labels = Vec::new();
    for line in mntr.lines() {
        let Some((key, value)) = line.split_once('\t') else {
            continue;
        };
        let name = key.strip_prefix("zk_").unwrap_or(key);
        if let (Some((metric, partition)), true) =
            (partition_metric(name), value.parse::<f64>().is_ok())
        {
            if partition == "0" {
                out.push_str(&format!("# TYPE {metric} gauge\n"));
            }
            out.push_str(&format!("{metric}{{partition=\"{partition}\"}} {value}\n"));
        } else if value.parse::<f64>().is_ok() {
            out.push_str(&format!("# TYPE {name} gauge\n{name} {value}\n"));
        } else {
            labels.push(format!(
                "{name}=\"{}\"",
                value.replace('\\', "\\\\").replace('"', "\\\"")
            ));
        }
    }
    out.push_str(&format!(
        "# TYPE info gauge\ninfo{{{}}} 1\n",
        labels.join(",")
    ));
    out
}

/// `stoa_partition_<p>_<figure>` → (`stoa_partition_<figure>`, p).
fn partition_metric(name: &str) -> Option<(String, &str)> {
    let rest = name.strip_prefix("stoa_partition_")?;
    let (partition, figure) = rest.split_once('_')?;
    partition.parse::<u32>().ok()?;
    Some((format!("stoa_partition_{figure}"), partition))
}

pub async fn serve(address: SocketAddr, scrapes: mpsc::Sender<ScrapeRequest>) {
    let listener = match TcpListener::bind(address).await {
        Ok(l) => l,
        Err(e) => {
            log::error!("metrics: cannot listen on {address}: {e}");
            return;
        }
    };
    log::info!("metrics: Prometheus endpoint on http://{address}/metrics");
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let scrapes = scrapes.clone();
        tokio::task::spawn_local(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < REQUEST_HEAD_BYTES_MAX
            {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let wanted = head.starts_with(b"GET /metrics ") || head.starts_with(b"GET / ");
            let (status, body) = if wanted {
                let (tx, rx) = oneshot::channel();
                if scrapes.send(tx).await.is_err() {
                    return;
                }
                ("200 OK", rx.await.unwrap_or_default())
            } else {
                ("404 Not Found", "only GET /metrics is served\n".to_string())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mntr_rows_become_gauges_and_strings_become_info_labels() {
        let text = render("zk_version\t3.9.2-stoa\nzk_znode_count\t7\nzk_avg_latency\t0.5000\n");
        assert!(text.contains("# TYPE znode_count gauge\nznode_count 7\n"));
        assert!(text.contains("avg_latency 0.5000\n"));
        assert!(text.contains("info{version=\"3.9.2-stoa\"} 1"));
        let parts = render("stoa_partition_0_term\t3\nstoa_partition_1_term\t4\n");
        assert!(parts.contains("# TYPE stoa_partition_term gauge\n"));
        assert!(parts.contains("stoa_partition_term{partition=\"0\"} 3\n"));
        assert!(parts.contains("stoa_partition_term{partition=\"1\"} 4\n"));
        assert_eq!(parts.matches("# TYPE stoa_partition_term").count(), 1);
    }
}

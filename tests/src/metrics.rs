//! Scraping Prometheus metrics from nodes and brokers, and reading series from the text.

/// `GET /metrics` from `addr` over plain HTTP/1.1: the content type and the body.
pub async fn scrape(addr: &str) -> Result<(String, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
    let text = String::from_utf8(raw).map_err(|e| e.to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP header end")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("scrape of {addr}: {head}"));
    }
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type: ").or_else(|| l.strip_prefix("Content-Type: ")))
        .unwrap_or_default()
        .to_string();
    Ok((content_type, body.to_string()))
}

/// The sum of every series of metric `name` (any labels) in a scrape; `None` if it has none.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The value of the series `series` (name and labels exactly as printed) in a scrape.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// FindBatches served by the running nodes of `c` so far (their `/metrics`).
pub async fn find_batches_served(c: &crate::Cluster) -> f64 {
    let mut total = 0.0;
    for id in c.running() {
        let Some(addr) = c.metrics_addr(id) else { continue };
        let Ok((_, text)) = scrape(addr).await else { continue };
        total += text
            .lines()
            .filter(|l| l.starts_with("diskless_grpc_requests_total{") && l.contains("/FindBatches\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}

//! Output: the side-by-side table (printed), a JSON file, and an SVG latency plot.

use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::workload::Measured;

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub workload: String,
    pub system: String,
    pub clients: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub requests_per_s: f64,
    pub batch_coordinates_per_s: f64,
    pub errors: u64,
    pub samples: u64,
}

impl Row {
    pub fn new(workload: &str, system: &str, clients: usize, m: &Measured) -> Row {
        Row {
            workload: workload.into(),
            system: system.into(),
            clients,
            p50_ms: m.ms(0.5),
            p90_ms: m.ms(0.9),
            p99_ms: m.ms(0.99),
            p999_ms: m.ms(0.999),
            max_ms: m.hist.max() as f64 / 1000.0,
            requests_per_s: m.ops as f64 / m.secs.max(1e-9),
            batch_coordinates_per_s: m.coords as f64 / m.secs.max(1e-9),
            errors: m.errors,
            samples: m.hist.len(),
        }
    }
}

/// The table: one line per workload, both systems side by side, and ratios.
pub fn table(rows: &[Row], ours: &str, theirs: &str) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<40} | {:>8} {:>8} {:>8} {:>10} {:>10} | {:>8} {:>8} {:>8} {:>10} {:>10} | {:>8} {:>8}\n",
        "workload",
        "p50 ms",
        "p99 ms",
        "p99.9",
        "req/s",
        "coords/s",
        "p50 ms",
        "p99 ms",
        "p99.9",
        "req/s",
        "coords/s",
        "thrpt×",
        "p99 ÷"
    ));
    out.push_str(&format!("{:<40} | {:^50} | {:^50} | {:^17}\n", "", ours, theirs, "ours vs theirs"));
    out.push_str(&format!("{}\n", "-".repeat(40 + 3 + 50 + 3 + 50 + 3 + 17)));
    let mut names: Vec<&str> = vec![];
    for r in rows {
        if !names.contains(&r.workload.as_str()) {
            names.push(&r.workload);
        }
    }
    let cell = |r: Option<&Row>| match r {
        Some(r) => format!(
            "{:>8.2} {:>8.2} {:>8.2} {:>10.0} {:>10.0}",
            r.p50_ms, r.p99_ms, r.p999_ms, r.requests_per_s, r.batch_coordinates_per_s
        ),
        None => format!("{:^50}", "-"),
    };
    for w in names {
        let a = rows.iter().find(|r| r.workload == w && r.system == ours);
        let b = rows.iter().find(|r| r.workload == w && r.system == theirs);
        let ratios = match (a, b) {
            (Some(a), Some(b)) => {
                let thr = if b.requests_per_s > 0.0 { a.requests_per_s / b.requests_per_s } else { f64::NAN };
                let lat = if a.p99_ms > 0.0 { b.p99_ms / a.p99_ms } else { f64::NAN };
                format!("{thr:>8.2} {lat:>8.2}")
            }
            _ => format!("{:>8} {:>8}", "-", "-"),
        };
        out.push_str(&format!("{:<40} | {} | {} | {}\n", w, cell(a), cell(b), ratios));
    }
    out.push_str(
        "thrpt× = our requests/s ÷ theirs (>1: we are faster); p99 ÷ = their p99 ÷ ours (>1: our tail is shorter)\n",
    );
    for r in rows.iter().filter(|r| r.errors > 0 && (r.system == ours || r.system == theirs)) {
        out.push_str(&format!(
            "ERRORS: {} {}: {} failed requests or refused batches\n",
            r.system, r.workload, r.errors
        ));
    }
    out
}

/// Commit latency (p50 and p99) against concurrent clients, both systems.
pub fn plot(rows: &[Row], path: &Path) -> anyhow::Result<()> {
    let commits: Vec<&Row> =
        rows.iter().filter(|r| r.workload.starts_with("commit") && r.workload.contains("saturation")).collect();
    let systems: Vec<String> = {
        let mut s: Vec<String> = commits.iter().map(|r| r.system.clone()).collect();
        s.sort();
        s.dedup();
        s
    };
    let max_y = commits.iter().map(|r| r.p99_ms).fold(1.0f64, f64::max) * 1.2;
    let max_x = commits.iter().map(|r| r.clients).max().unwrap_or(1) as f64;
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("CommitFile latency at saturation (64 batches per commit)", ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..max_x * 1.05, 0f64..max_y)?;
    chart.configure_mesh().x_desc("concurrent clients").y_desc("latency (ms)").draw()?;
    let colors = [RED, BLUE, GREEN, MAGENTA];
    for (i, sys) in systems.iter().enumerate() {
        let color = colors[i % colors.len()];
        let mut pts: Vec<&&Row> = commits.iter().filter(|r| &r.system == sys).collect();
        pts.sort_by_key(|r| r.clients);
        for (q, dashed) in [("p50", false), ("p99", true)] {
            let series: Vec<(f64, f64)> =
                pts.iter().map(|r| (r.clients as f64, if q == "p50" { r.p50_ms } else { r.p99_ms })).collect();
            let style = if dashed { color.mix(0.5).stroke_width(2) } else { color.stroke_width(3) };
            chart
                .draw_series(LineSeries::new(series.clone(), style))?
                .label(format!("{sys} {q}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            chart.draw_series(series.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
        }
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

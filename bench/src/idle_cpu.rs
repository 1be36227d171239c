//! Idle CPU: how much CPU our node processes burn with no traffic (timers, heartbeats, background
//! work), read from `/proc/<pid>/stat` (user + system time) at the start and end of a window, as
//! a percentage of one core per node. Owns the measurement only; it must not start processes.

use std::time::{Duration, Instant};

use anyhow::Context;

/// User + system CPU time of a process so far, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("read /proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces: count fields after it.
    let after = stat.rfind(')').map(|i| &stat[i + 1..]).context("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11).context("no utime")?.parse()?;
    let stime: u64 = fields.get(12).context("no stime")?.parse()?;
    Ok(utime + stime)
}

fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The CPU each process used over `window`, in % of one core.
pub async fn measure(pids: &[u32], window: Duration) -> anyhow::Result<Vec<f64>> {
    let before: Vec<u64> = pids.iter().map(|&p| cpu_ticks(p)).collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let after: Vec<u64> = pids.iter().map(|&p| cpu_ticks(p)).collect::<Result<_, _>>()?;
    let secs = t0.elapsed().as_secs_f64();
    let hz = ticks_per_second();
    Ok(before.iter().zip(&after).map(|(b, a)| a.saturating_sub(*b) as f64 / hz / secs * 100.0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_cpu_time() {
        // Burn a little CPU so the count is above zero, then read our own stat line.
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        assert!(x != 1);
        assert!(cpu_ticks(std::process::id()).unwrap() > 0);
    }
}

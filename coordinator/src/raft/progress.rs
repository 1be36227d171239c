//! A watchdog for long transfers (snapshots): the sender counts what it hands to the transport,
//! and the transfer is abandoned when the count stops moving for a while, however long the whole
//! transfer takes. It owns no I/O; callers race [`Progress::stalled`] against their transfer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Progress of one transfer, shared between the producer of its parts and the watchdog.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    parts: Arc<AtomicU64>,
    finished: Arc<AtomicBool>,
}

impl Progress {
    /// One more part went out.
    pub fn advance(&self) {
        self.parts.fetch_add(1, Ordering::Relaxed);
    }

    /// Everything went out; what is left is the other side's answer.
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }

    /// Resolves once no part went out for `idle` (detected within `idle` to `2 × idle`), or, once
    /// everything went out, when the answer has not come within `answer`.
    pub async fn stalled(&self, idle: Duration, answer: Duration) {
        let mut seen = self.parts.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(idle).await;
            if self.finished.load(Ordering::Relaxed) {
                tokio::time::sleep(answer).await;
                return;
            }
            let now = self.parts.load(Ordering::Relaxed);
            if now == seen {
                return;
            }
            seen = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(30);
    const ANSWER: Duration = Duration::from_secs(600);

    // Paused tokio time: the timers advance only when every task waits, so these are exact.

    #[tokio::test(start_paused = true)]
    async fn a_transfer_that_keeps_moving_is_never_called_stalled() {
        let p = Progress::default();
        let sender = p.clone();
        let moving = async move {
            // 100 parts, one every 20 s: 2,000 s in all, far beyond any total deadline of IDLE.
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                sender.advance();
            }
        };
        tokio::select! {
            _ = moving => {}
            _ = p.stalled(IDLE, ANSWER) => panic!("called stalled while moving"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_transfer_that_stops_moving_is_stalled_within_two_idle_periods() {
        let p = Progress::default();
        let started = tokio::time::Instant::now();
        p.advance();
        p.stalled(IDLE, ANSWER).await;
        let waited = started.elapsed();
        assert!(waited >= IDLE && waited <= 2 * IDLE, "stalled after {waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn once_everything_went_out_the_answer_gets_its_own_time() {
        let p = Progress::default();
        p.finish();
        let started = tokio::time::Instant::now();
        p.stalled(IDLE, ANSWER).await;
        assert_eq!(started.elapsed(), IDLE + ANSWER);
    }
}

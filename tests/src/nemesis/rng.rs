//! Seeded randomness for the fault suite: one `u64` seed drives every choice the nemesis and the
//! workload make, so a run can be replayed (the same faults of the same kinds on the same targets,
//! the same operations; the interleaving with real processes still varies).
//!
//! SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough for choosing faults. Each
//! worker gets its own stream (`fork`), so adding a worker does not change the others' choices.
//! It must not be used for anything cryptographic.

use std::ops::Range;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An independent stream for `stream` (a worker number), derived from this one's seed.
    pub fn fork(&self, stream: u64) -> Rng {
        let mut r = Rng::new(self.state ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03));
        r.next_u64();
        r
    }

    /// Uniform in `range` (which must not be empty).
    pub fn range(&mut self, range: Range<u64>) -> u64 {
        assert!(range.start < range.end, "empty range");
        range.start + self.next_u64() % (range.end - range.start)
    }

    /// Uniform index below `n` (> 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.range(0..n as u64) as usize
    }

    /// True with probability `p` (0..=1).
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A duration between `lo` and `hi`, log-uniform: short ones are as likely per factor of
    /// two as long ones (a fault schedule wants many quick faults and some long ones).
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (lo.as_secs_f64().max(1e-3), hi.as_secs_f64().max(1e-3));
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        Duration::from_secs_f64(lo * (hi / lo).powf(u))
    }

    /// The elements of `items` in a random order.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_gives_one_sequence_and_forks_are_independent() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        let xs: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let (mut f1, mut f2) = (a.fork(1), a.fork(2));
        assert_ne!(f1.next_u64(), f2.next_u64());
        let d = Rng::new(7).duration(Duration::from_millis(200), Duration::from_secs(3));
        assert!(d >= Duration::from_millis(200) && d <= Duration::from_secs(3));
    }
}

//! Which metadata partition owns a topic-partition.
//!
//! The mapping is part of the on-disk and on-wire contract: brokers split commits by it and every
//! coordinator replica filters partitions by it. It must never change for an existing cluster, so
//! it is defined here once, over fixed bytes, with a fixed hash (CRC32C, not `std`'s randomised
//! hasher).

/// The metadata partition (Raft group) in `0..num_metadata_partitions` that owns partition
/// `partition` of topic `topic_id`.
///
/// `num_metadata_partitions` is `diskless.metadata.topic.num.partitions`; it must be at least 1.
pub fn metadata_partition_for(topic_id: &[u8; 16], partition: i32, num_metadata_partitions: u32) -> u32 {
    assert!(num_metadata_partitions > 0, "a cluster has at least one metadata partition");
    let mut bytes = [0u8; 20];
    bytes[..16].copy_from_slice(topic_id);
    bytes[16..].copy_from_slice(&partition.to_be_bytes());
    crc32c::crc32c(&bytes) % num_metadata_partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_is_stable_across_releases() {
        // Pinned values: if this test fails, existing clusters would lose track of partitions.
        let topic = [7u8; 16];
        let got: Vec<u32> = (0..8).map(|p| metadata_partition_for(&topic, p, 8)).collect();
        assert_eq!(got, PINNED);
    }

    const PINNED: [u32; 8] = [3, 0, 4, 7, 4, 7, 3, 0];

    #[test]
    fn partitions_spread_over_metadata_partitions() {
        let mut counts = [0u32; 8];
        for t in 0..64u8 {
            for p in 0..16 {
                counts[metadata_partition_for(&[t; 16], p, 8) as usize] += 1;
            }
        }
        // 1024 partitions over 8 groups: every group gets a fair share (expected 128).
        assert!(counts.iter().all(|&c| (80..=176).contains(&c)), "{counts:?}");
    }
}

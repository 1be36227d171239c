//! Which metadata partition owns a topic-partition.
//!
//! The mapping is part of the on-disk and on-wire contract: brokers split commits by it and every
//! coordinator replica filters partitions by it. It must never change for an existing cluster, so
//! it is defined here once, over fixed bytes, with fixed functions (not `std`'s randomised hasher):
//! CRC32C of the topic id, then the SplitMix64 finalizer over that and the partition index. (CRC
//! alone is linear: the partitions of one topic would land on a fraction of the metadata
//! partitions.)

/// The metadata partition (Raft group) in `0..num_metadata_partitions` that owns partition
/// `partition` of topic `topic_id`.
///
/// `num_metadata_partitions` is `diskless.metadata.topic.num.partitions`; it must be at least 1.
pub fn metadata_partition_for(topic_id: &[u8; 16], partition: i32, num_metadata_partitions: u32) -> u32 {
    assert!(num_metadata_partitions > 0, "a cluster has at least one metadata partition");
    let seed = (u64::from(crc32c::crc32c(topic_id)) << 32) | u64::from(partition as u32);
    (splitmix64(seed) % u64::from(num_metadata_partitions)) as u32
}

/// The metadata partition in `0..num_metadata_partitions` that holds consumer group `group_id`'s
/// metadata and committed offsets (Kafka's `__consumer_offsets` partition of the group): CRC32C of
/// the group id's UTF-8 bytes through the same finalizer. Part of the contract, like
/// [`metadata_partition_for`].
pub fn metadata_partition_for_group(group_id: &str, num_metadata_partitions: u32) -> u32 {
    assert!(num_metadata_partitions > 0, "a cluster has at least one metadata partition");
    (splitmix64(u64::from(crc32c::crc32c(group_id.as_bytes()))) % u64::from(num_metadata_partitions)) as u32
}

/// The rendezvous (highest random weight) score of broker `broker_id` for `key`: of the live
/// brokers, the one with the highest score owns the key (a topic-partition's leadership, a consumer
/// group's coordination). Every broker computes the same owner from the same live set, and when a
/// broker joins or leaves only the keys it gains or held move. CRC32C of the key, then the
/// SplitMix64 finalizer over that and the broker id; fixed like the mappings above.
pub fn rendezvous_score(key: &[u8], broker_id: i32) -> u64 {
    splitmix64((u64::from(crc32c::crc32c(key)) << 32) ^ u64::from(broker_id as u32) ^ 0x5bd1_e995)
}

/// The key of a topic-partition for [`rendezvous_score`]: the topic id, then the partition index
/// (big-endian).
pub fn partition_key(topic_id: &[u8; 16], partition: i32) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..16].copy_from_slice(topic_id);
    k[16..].copy_from_slice(&partition.to_be_bytes());
    k
}

/// SplitMix64's output function: a bijective, well-mixing finalizer.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

    const PINNED: [u32; 8] = [4, 0, 5, 2, 4, 7, 4, 1];

    #[test]
    fn group_mapping_is_stable_across_releases() {
        let got: Vec<u32> =
            ["a", "b", "grp", "consumers-1"].iter().map(|g| metadata_partition_for_group(g, 8)).collect();
        assert_eq!(got, GROUP_PINNED);
    }

    const GROUP_PINNED: [u32; 4] = [5, 2, 5, 5];

    #[test]
    fn rendezvous_scores_are_stable_across_releases() {
        // Brokers of different releases must name the same leaders and coordinators.
        let got: Vec<u64> = [(b"grp".as_slice(), 1), (b"grp".as_slice(), 2), (&partition_key(&[7; 16], 3)[..], 1)]
            .iter()
            .map(|(k, id)| rendezvous_score(k, *id))
            .collect();
        assert_eq!(got, RENDEZVOUS_PINNED);
    }

    const RENDEZVOUS_PINNED: [u64; 3] = [17985516924351676465, 644269045556125201, 14560814290717053684];

    #[test]
    fn rendezvous_owners_spread_and_move_only_when_their_owner_goes() {
        let owner = |key: &[u8], ids: &[i32]| *ids.iter().max_by_key(|id| rendezvous_score(key, **id)).unwrap();
        let keys: Vec<[u8; 20]> = (0..600).map(|p| partition_key(&[9; 16], p)).collect();
        let mut counts = [0u32; 3];
        for k in &keys {
            counts[owner(k, &[1, 2, 3]) as usize - 1] += 1;
        }
        assert!(counts.iter().all(|&c| (140..=260).contains(&c)), "{counts:?}");
        for k in &keys {
            let before = owner(k, &[1, 2, 3]);
            let after = owner(k, &[1, 3]);
            if before != 2 {
                assert_eq!(after, before, "a key not held by the broker that left moved");
            }
        }
    }

    #[test]
    fn partitions_spread_over_metadata_partitions() {
        let mut counts = [0u32; 8];
        for t in 0..64u8 {
            for p in 0..16 {
                counts[metadata_partition_for(&[t; 16], p, 8) as usize] += 1;
            }
        }
        // 1024 partitions over 8 metadata partitions: each gets a fair share (expected 128).
        assert!(counts.iter().all(|&c| (80..=176).contains(&c)), "{counts:?}");
    }

    #[test]
    fn the_partitions_of_one_topic_reach_every_metadata_partition() {
        for t in 0..32u8 {
            let mut seen = [false; 8];
            for p in 0..64 {
                seen[metadata_partition_for(&[t; 16], p, 8) as usize] = true;
            }
            assert!(seen.iter().all(|s| *s), "topic {t}: {seen:?}");
        }
    }
}

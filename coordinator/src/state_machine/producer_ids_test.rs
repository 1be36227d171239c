//! Producer-id blocks: consecutive, never handed out twice, only by metadata partition 0.

use super::command::{ErrorCode, Op, Outcome, ProducerIdBlock};
use super::fixture::Fixture;
use super::MAX_PRODUCER_ID_BLOCK;

fn allocate(f: &mut Fixture, count: u32) -> Result<ProducerIdBlock, ErrorCode> {
    match f.apply(Op::AllocateProducerIds { broker_id: 1, count }) {
        Outcome::ProducerIds(r) => r.map_err(|e| e.code),
        other => panic!("unexpected outcome {other:?}"),
    }
}

#[test]
fn blocks_follow_each_other_and_never_overlap() {
    let mut f = Fixture::new();
    assert_eq!(allocate(&mut f, 1000), Ok(ProducerIdBlock { first: 0, len: 1000 }));
    assert_eq!(allocate(&mut f, 10), Ok(ProducerIdBlock { first: 1000, len: 10 }));
    assert_eq!(allocate(&mut f, 1), Ok(ProducerIdBlock { first: 1010, len: 1 }));
}

#[test]
fn a_refused_allocation_hands_out_nothing() {
    let mut f = Fixture::new();
    assert_eq!(allocate(&mut f, 0), Err(ErrorCode::InvalidRequest));
    assert_eq!(allocate(&mut f, MAX_PRODUCER_ID_BLOCK + 1), Err(ErrorCode::InvalidRequest));
    assert_eq!(allocate(&mut f, 5), Ok(ProducerIdBlock { first: 0, len: 5 }));
}

#[test]
fn only_metadata_partition_0_allocates() {
    let mut f = Fixture::metadata_partition(1, 4);
    assert_eq!(allocate(&mut f, 5), Err(ErrorCode::InvalidRequest));
}

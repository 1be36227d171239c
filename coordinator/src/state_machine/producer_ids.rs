//! Producer ids for idempotent producers, handed to brokers in blocks.
//!
//! Kafka's controller gives each broker blocks of producer ids (AllocateProducerIds, KIP-730) so
//! that no two brokers ever hand out the same id, whatever their clocks or configured ids. Here one
//! counter in metadata partition 0 ([`PRODUCER_ID_AUTHORITY`]) does it: each allocation is a log
//! entry, so a block is never handed out twice, even across leader changes and restarts. A block
//! whose answer was lost is simply never used. Other metadata partitions refuse the operation.

use super::command::{ErrorCode, Failure, ProducerIdBlock};
use super::keys::META_NEXT_PRODUCER_ID;
use super::{tables, StateMachine};
use crate::storage::{StorageError, Txn};

/// The metadata partition that allocates producer ids.
pub const PRODUCER_ID_AUTHORITY: u32 = 0;
/// The largest block one allocation hands out.
pub const MAX_PRODUCER_ID_BLOCK: u32 = 1_000_000;

pub fn allocate(
    sm: &StateMachine,
    txn: &mut Txn<'_>,
    count: u32,
) -> Result<Result<ProducerIdBlock, Failure>, StorageError> {
    let invalid = |m: String| Ok(Err(Failure::new(ErrorCode::InvalidRequest, m)));
    if sm.metadata_partition != PRODUCER_ID_AUTHORITY {
        return invalid(format!(
            "producer ids are allocated by metadata partition {PRODUCER_ID_AUTHORITY}, not {}",
            sm.metadata_partition
        ));
    }
    if count == 0 || count > MAX_PRODUCER_ID_BLOCK {
        return invalid(format!("a block of producer ids has 1 to {MAX_PRODUCER_ID_BLOCK} ids, not {count}"));
    }
    let key = sm.keys.meta(META_NEXT_PRODUCER_ID);
    let first: i64 = tables::get(txn, &key)?.unwrap_or(0);
    let Some(next) = first.checked_add(i64::from(count)) else {
        return Ok(Err(Failure::new(ErrorCode::UnknownServerError, "producer ids are exhausted")));
    };
    tables::put(txn, key, &next)?;
    Ok(Ok(ProducerIdBlock { first, len: count }))
}

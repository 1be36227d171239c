//! Records a broker keeps by compare-and-set: the one rule every such kind follows (a
//! transactional id's `TxnRecord`, a share partition's `ShareStateRecord`, a consumer group's
//! `GroupRecord` when its coordinator names a version).
//!
//! A broker that coordinates a key reads its record, decides the next state in memory and stores
//! it naming the version it read. The store applies only if that is still the stored version (0:
//! nothing stored), and the stored record gets the next version; otherwise it is refused with the
//! kind's "fenced" code, naming the version and owner found, so a broker deposed meanwhile moves
//! nothing and the one that took over keeps what it answered. A record created anew (nothing
//! stored: never, or deleted since) is numbered from the command's time, so no copy of an earlier
//! one matches it.
//!
//! Owns the version check, the message of a refusal and the numbering. It must not know what a
//! kind stores, nor its own checks (each kind's module applies those).

use std::fmt::Display;

use super::command::{ErrorCode, Failure};

/// A record stored by compare-and-set.
pub trait Versioned {
    /// The version it was stored at (≥ 1 once stored).
    fn version(&self) -> u64;
    /// Who stored it (a broker's coordinator incarnation), for the message of a refusal.
    fn owner(&self) -> &str;
}

/// Whether a store naming `expected` may replace `stored` (0 and `None`: nothing stored); else
/// the refusal with code `fenced`, `what` naming the record.
pub fn check<R: Versioned>(
    stored: Option<&R>,
    expected: u64,
    what: impl Display,
    fenced: ErrorCode,
) -> Result<(), Failure> {
    let version = stored.map_or(0, |r| r.version());
    if version == expected {
        return Ok(());
    }
    Err(Failure::new(
        fenced,
        format!(
            "{what} is at version {version} (stored by {}), not {expected}",
            stored.map_or("nobody", |r| r.owner())
        ),
    ))
}

/// The version a store over `stored` (0: nothing stored) gives the record, at the command's time
/// `now`. A record created anew gets a version derived from that time (`now << 20`), above any
/// version a copy of an earlier record of the key can hold (that would take 2^20 stores a
/// millisecond): a broker's stale copy of a deleted record can never overwrite its re-creation.
pub fn next(stored: u64, now: i64) -> u64 {
    match stored {
        0 => ((now.max(0) as u64) << 20).max(1),
        v => v.saturating_add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct R(u64, &'static str);
    impl Versioned for R {
        fn version(&self) -> u64 {
            self.0
        }
        fn owner(&self) -> &str {
            self.1
        }
    }

    #[test]
    fn a_store_applies_only_at_the_stored_version() {
        assert_eq!(check::<R>(None, 0, "k", ErrorCode::FencedStateEpoch), Ok(()));
        assert_eq!(check(Some(&R(7, "b1")), 7, "k", ErrorCode::FencedStateEpoch), Ok(()));
        let f = check(Some(&R(7, "b1")), 6, "record k", ErrorCode::TransactionCoordinatorFenced).unwrap_err();
        assert_eq!(f.code, ErrorCode::TransactionCoordinatorFenced);
        assert_eq!(f.message, "record k is at version 7 (stored by b1), not 6");
        let f = check::<R>(None, 3, "record k", ErrorCode::FencedStateEpoch).unwrap_err();
        assert_eq!(f.message, "record k is at version 0 (stored by nobody), not 3");
    }

    #[test]
    fn a_record_created_anew_gets_a_version_no_copy_of_an_earlier_one_holds() {
        assert_eq!(next(41, 5), 42);
        let fresh = next(0, 1_000);
        assert_eq!(fresh, 1_000 << 20);
        // A record stored a million times since an earlier creation at time 0 is still below it.
        assert!(next(0, 0) + 1_000_000 < fresh);
        assert_eq!(next(0, -5), 1, "a clock before the epoch still numbers from 1");
        assert_eq!(next(u64::MAX, 0), u64::MAX, "saturates rather than wraps to 'nothing stored'");
    }
}

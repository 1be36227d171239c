//! Splitting a request's items by metadata partition, and putting the parts' answers back in
//! request order: the coordinator's service and the broker's client both split requests this way,
//! so they share it. Owns the bookkeeping only (which item went to which part, how a part's answer
//! or failure lands on its items); who owns an item ([`crate::metadata_partition_for`]) and what a
//! failure becomes are the callers'.

use std::collections::BTreeMap;

/// The items' indexes per metadata partition (partitions ascending, request order within each).
/// An item for which `owner` gives `None` is in no part (the caller answers it itself).
pub fn split_by_partition<T>(
    items: impl IntoIterator<Item = T>,
    mut owner: impl FnMut(T) -> Option<u32>,
) -> BTreeMap<u32, Vec<usize>> {
    let mut parts: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, item) in items.into_iter().enumerate() {
        if let Some(g) = owner(item) {
            parts.entry(g).or_default().push(i);
        }
    }
    parts
}

/// Why a part's items got no answer of their own.
#[derive(Debug)]
pub enum PartFailure<E> {
    /// The part could not be served (its error).
    Failed(E),
    /// The part answered another number of items than it was sent.
    Miscounted { answered: usize, sent: usize },
}

/// Puts one part's answers into `slots` at the part's indexes `idxs`, in order; a part that failed
/// or answered a wrong number of items fills each of its slots with `failed`'s answer.
pub fn merge_part<R, E>(
    slots: &mut [Option<R>],
    idxs: &[usize],
    answer: Result<Vec<R>, E>,
    mut failed: impl FnMut(&PartFailure<E>) -> R,
) {
    let failure = match answer {
        Ok(rs) if rs.len() == idxs.len() => {
            for (&i, r) in idxs.iter().zip(rs) {
                slots[i] = Some(r);
            }
            return;
        }
        Ok(rs) => PartFailure::Miscounted { answered: rs.len(), sent: idxs.len() },
        Err(e) => PartFailure::Failed(e),
    };
    for &i in idxs {
        slots[i] = Some(failed(&failure));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_come_back_in_request_order_and_failed_parts_fill_their_items() {
        let items = [3u32, 1, 3, 9, 1];
        // 9 is nobody's: answered by the caller.
        let parts = split_by_partition(items.iter(), |&g| (g != 9).then_some(g));
        assert_eq!(parts.into_iter().collect::<Vec<_>>(), vec![(1, vec![1, 4]), (3, vec![0, 2])]);
        let mut slots: Vec<Option<String>> = vec![None, None, None, Some("mine".into()), None];
        merge_part(&mut slots, &[1, 4], Ok::<_, ()>(vec!["b".into(), "e".into()]), |_| "x".into());
        merge_part(&mut slots, &[0, 2], Err("down"), |f| format!("{f:?}"));
        assert_eq!(
            slots.into_iter().flatten().collect::<Vec<_>>(),
            ["Failed(\"down\")", "b", "Failed(\"down\")", "mine", "e"]
        );
        let mut slots: Vec<Option<String>> = vec![None; 2];
        merge_part(&mut slots, &[0, 1], Ok::<_, ()>(vec!["only one".into()]), |f| format!("{f:?}"));
        assert_eq!(slots[1].as_deref(), Some("Miscounted { answered: 1, sent: 2 }"));
    }
}

//! This broker process's incarnation: its broker id and a number drawn once when the process
//! starts. It is the one identity the broker stamps on what it stores in the coordinator cluster
//! (group, share-state and transaction records name their coordinator by its tag, so the cluster
//! can tell a resend of this process's store from another broker's) and registers under in the
//! broker registry (a restarted process is a new incarnation of the same id).
//!
//! Owns drawing the number and formatting the tag; it must not know what is stored with it.

/// One process of one broker id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incarnation {
    broker_id: i32,
    number: u64,
}

impl Incarnation {
    /// A fresh incarnation of broker `broker_id` (one per process: made once, at start).
    pub fn new(broker_id: i32) -> Incarnation {
        Incarnation { broker_id, number: uuid::Uuid::new_v4().as_u64_pair().0 }
    }

    pub fn broker_id(&self) -> i32 {
        self.broker_id
    }

    /// The number drawn at start, as the broker registry holds it.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// `broker-{id}-{number in hex}`: the coordinator named on stored records.
    pub fn tag(&self) -> String {
        format!("broker-{}-{:016x}", self.broker_id, self.number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_processes_of_one_broker_id_have_different_tags_with_the_id_in_front() {
        let (a, b) = (Incarnation::new(7), Incarnation::new(7));
        assert_ne!(a.tag(), b.tag());
        assert!(a.tag().starts_with("broker-7-") && a.tag().len() == "broker-7-".len() + 16, "{}", a.tag());
        assert_eq!(a.clone(), a);
    }
}

//! Share sessions (KIP-932), as Kafka's `ShareSessionCache`: per (group, member) the partitions a
//! member fetches and the epoch its next ShareFetch or ShareAcknowledge must carry. Epoch 0 opens
//! a session (replacing one the member had), -1 closes it, any other must be the session's;
//! each accepted request moves the epoch on. At most `max` sessions are kept.
//!
//! Pure bookkeeping behind one lock: it must not read or change share-partition states (the
//! handler releases a closed session's records through `states`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use diskless_proto::ErrorCode;

/// A share partition of a session: topic id, partition.
pub type Tp = ([u8; 16], i32);

#[derive(Debug)]
struct Session {
    /// The connection that opened it.
    conn: u64,
    epoch: i32,
    partitions: BTreeSet<Tp>,
    used: Instant,
}

/// The most partitions one share session holds (more: INVALID_REQUEST).
pub const MAX_SESSION_PARTITIONS: usize = 10_000;

/// The share sessions of this broker.
pub struct ShareSessions {
    max: usize,
    /// A session unused this long may be evicted to make room for a new one.
    idle: Duration,
    sessions: Mutex<HashMap<(String, String), Session>>,
}

/// What a request did to its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// A new session (epoch 0) with these partitions.
    New(Vec<Tp>),
    /// The session goes on with these partitions (after adding and forgetting).
    Continued(Vec<Tp>),
    /// The session was closed (epoch -1); these were its partitions.
    Closed(Vec<Tp>),
}

impl ShareSessions {
    pub fn new(max: usize, idle: Duration) -> ShareSessions {
        ShareSessions { max, idle, sessions: Mutex::new(HashMap::new()) }
    }

    /// A ShareFetch's session step: epoch 0 opens (with `add`), -1 closes, else the epoch must be
    /// the session's; `add` joins the session, `forget` leaves it. A ShareAcknowledge passes
    /// `fetch: false` (epoch 0 is then INVALID_SHARE_SESSION_EPOCH, and it adds nothing).
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &self,
        conn: u64,
        group_id: &str,
        member_id: &str,
        epoch: i32,
        add: &[Tp],
        forget: &[Tp],
        fetch: bool,
    ) -> Result<Opened, ErrorCode> {
        let mut all = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let key = (group_id.to_string(), member_id.to_string());
        match epoch {
            0 if !fetch => Err(ErrorCode::InvalidShareSessionEpoch),
            0 => {
                if add.len() > MAX_SESSION_PARTITIONS {
                    return Err(ErrorCode::InvalidRequest);
                }
                if !all.contains_key(&key) && all.len() >= self.max {
                    // Room is made by evicting the longest unused session, if it is idle.
                    let oldest = all.iter().min_by_key(|(_, s)| s.used).map(|(k, s)| (k.clone(), s.used));
                    match oldest {
                        Some((k, used)) if used.elapsed() >= self.idle => {
                            all.remove(&k);
                        }
                        _ => return Err(ErrorCode::ShareSessionLimitReached),
                    }
                }
                let partitions: BTreeSet<Tp> = add.iter().copied().collect();
                let out = partitions.iter().copied().collect();
                all.insert(key, Session { conn, epoch: 1, partitions, used: Instant::now() });
                Ok(Opened::New(out))
            }
            -1 => match all.remove(&key) {
                Some(s) => Ok(Opened::Closed(s.partitions.into_iter().collect())),
                None => Err(ErrorCode::ShareSessionNotFound),
            },
            e => {
                let s = all.get_mut(&key).ok_or(ErrorCode::ShareSessionNotFound)?;
                if s.epoch != e {
                    return Err(ErrorCode::InvalidShareSessionEpoch);
                }
                if fetch && s.partitions.len().saturating_add(add.len()) > MAX_SESSION_PARTITIONS {
                    return Err(ErrorCode::InvalidRequest);
                }
                s.epoch = s.epoch.checked_add(1).unwrap_or(1);
                s.used = Instant::now();
                if fetch {
                    s.partitions.extend(add.iter().copied());
                    for f in forget {
                        s.partitions.remove(f);
                    }
                }
                Ok(Opened::Continued(s.partitions.iter().copied().collect()))
            }
        }
    }

    /// Closes the session of `member_id` in `group_id` if connection `conn` opened it (the
    /// connection closed); returns its partitions.
    pub fn close_opened_by(&self, conn: u64, group_id: &str, member_id: &str) -> Vec<Tp> {
        let mut all = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let key = (group_id.to_string(), member_id.to_string());
        if all.get(&key).is_some_and(|s| s.conn == conn) {
            return all.remove(&key).map(|s| s.partitions.into_iter().collect()).unwrap_or_default();
        }
        vec![]
    }

    /// Closes every session of `member_id` in `group_id` (the member left the group); returns the
    /// partitions they held.
    pub fn close_member(&self, group_id: &str, member_id: &str) -> Vec<Tp> {
        let mut all = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        all.remove(&(group_id.to_string(), member_id.to_string()))
            .map(|s| s.partitions.into_iter().collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Tp = ([1; 16], 0);
    const B: Tp = ([1; 16], 1);

    #[test]
    fn a_session_opens_at_zero_moves_its_epoch_on_and_closes_at_minus_one() {
        let s = ShareSessions::new(10, Duration::from_secs(60));
        assert_eq!(s.step(1, "g", "m", 1, &[], &[], true), Err(ErrorCode::ShareSessionNotFound));
        assert_eq!(s.step(1, "g", "m", 0, &[A], &[], true), Ok(Opened::New(vec![A])));
        assert_eq!(s.step(1, "g", "m", 2, &[], &[], true), Err(ErrorCode::InvalidShareSessionEpoch));
        assert_eq!(s.step(1, "g", "m", 1, &[B], &[A], true), Ok(Opened::Continued(vec![B])));
        // ShareAcknowledge shares the epoch sequence, and cannot open a session.
        assert_eq!(s.step(1, "g", "m", 2, &[], &[], false), Ok(Opened::Continued(vec![B])));
        assert_eq!(s.step(1, "g", "m", 0, &[], &[], false), Err(ErrorCode::InvalidShareSessionEpoch));
        assert_eq!(s.step(1, "g", "m", -1, &[], &[], false), Ok(Opened::Closed(vec![B])));
        assert!(s.is_empty());
    }

    #[test]
    fn sessions_are_bounded_and_reopening_replaces() {
        let s = ShareSessions::new(1, Duration::from_secs(60));
        s.step(1, "g", "m", 0, &[A], &[], true).unwrap();
        assert_eq!(s.step(1, "g", "m", 0, &[B], &[], true), Ok(Opened::New(vec![B])));
        assert_eq!(s.step(1, "g", "n", 0, &[A], &[], true), Err(ErrorCode::ShareSessionLimitReached));
        assert_eq!(s.close_member("g", "m"), vec![B]);
        s.step(1, "g", "n", 0, &[A], &[], true).unwrap();
        // An idle session gives way to a new one.
        let s = ShareSessions::new(1, Duration::ZERO);
        s.step(1, "g", "m", 0, &[A], &[], true).unwrap();
        s.step(1, "g", "n", 0, &[A], &[], true).unwrap();
        assert_eq!(s.step(1, "g", "m", 1, &[], &[], true), Err(ErrorCode::ShareSessionNotFound));
    }
}

//! The fetch path's object reads: the byte ranges the fetches need, read with as few GETs as the
//! data allows. Close ranges of one object are coalesced into one ranged GET; a range another
//! fetch is already reading is awaited rather than read again (single flight: consumers replaying
//! the same data share their GETs); and reads of old data — batches appended more than
//! `catch_up_age_ms` ago, what a replaying consumer asks for — share a per-broker budget of bytes
//! in flight, so a replay storm cannot take the object store from the tail readers, whose reads
//! never wait on it.
//!
//! Owns the GETs; it checks nothing of what it read (`Reader::assemble` does) and caches nothing
//! (the range cache in front of it does).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt, Shared};
use futures_util::stream::{self, StreamExt};
use tokio::sync::Semaphore;

use crate::storage::Storage;

/// Objects read at once by one fetch, at most.
const PARALLEL_OBJECTS: usize = 16;
/// The budget's unit, in bytes.
const UNIT: u64 = 1024;

/// One byte range a fetch needs.
#[derive(Debug, Clone)]
pub struct Need {
    pub key: String,
    pub range: Range<u64>,
    /// When its batch was appended (the coordinator's clock, Unix ms).
    pub appended_ms: i64,
}

/// What was read of one object: ranges with their bytes, or why they could not be read.
pub type Got = Vec<(Range<u64>, Result<Bytes, String>)>;

/// A shareable GET. A named type, not an alias: a `dyn Future + 'static` in the fetch future's
/// signature trips the compiler's proof that the future is `Send`.
#[derive(Clone)]
struct Flight(Shared<BoxFuture<'static, Arc<Result<Vec<Bytes>, String>>>>);
type FlightMap = HashMap<String, Vec<InFlight>>;
/// A flight's object, ranges and outcome.
type Landed = (String, Vec<Range<u64>>, Arc<Result<Vec<Bytes>, String>>);

/// Forgets the flights a read issued when it ends, finished or dropped half-way (a fetch whose
/// client went): a finished flight is never joined later, a dropped one's joiners still drive it.
struct Issued {
    map: Arc<Mutex<FlightMap>>,
    flights: Vec<(String, u64)>,
}

impl Drop for Issued {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for (key, id) in &self.flights {
            if let Some(flights) = map.get_mut(key) {
                flights.retain(|f| f.id != *id);
                if flights.is_empty() {
                    map.remove(key);
                }
            }
        }
    }
}

/// Awaits one flight.
async fn wait((key, ranges, flight): (String, Vec<Range<u64>>, Flight)) -> Landed {
    (key, ranges, flight.0.await)
}

/// A GET under way: the ranges it reads.
struct InFlight {
    id: u64,
    ranges: Vec<Range<u64>>,
    flight: Flight,
}

pub struct ObjectReads {
    storage: Storage,
    gap: u64,
    catch_up_age_ms: i64,
    /// The catch-up budget, in [`UNIT`]s.
    budget: Arc<Semaphore>,
    budget_units: u32,
    in_flight: Arc<Mutex<FlightMap>>,
    ids: AtomicU64,
    /// GETs issued (for tests and the metrics).
    gets: AtomicU64,
}

impl ObjectReads {
    pub fn new(storage: Storage, gap: u64, catch_up_age_ms: u64, catch_up_bytes_in_flight: u64) -> ObjectReads {
        let budget_units = u32::try_from((catch_up_bytes_in_flight / UNIT).max(1)).unwrap_or(u32::MAX >> 4);
        ObjectReads {
            storage,
            gap,
            catch_up_age_ms: i64::try_from(catch_up_age_ms).unwrap_or(i64::MAX),
            budget: Arc::new(Semaphore::new(budget_units as usize)),
            budget_units,
            in_flight: Arc::default(),
            ids: AtomicU64::new(0),
            gets: AtomicU64::new(0),
        }
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, FlightMap> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads what `needed` names, as of `now_ms` (Unix ms, for the age of the data): per object,
    /// ranges covering each range asked for.
    pub async fn read(&self, needed: Vec<Need>, now_ms: i64) -> HashMap<String, Got> {
        let mut by_key: BTreeMap<String, Vec<Need>> = BTreeMap::new();
        for n in needed {
            by_key.entry(n.key.clone()).or_default().push(n);
        }
        // Per object: the flights joined (another fetch's GET covers the range) and the flights
        // issued here (the rest, coalesced).
        let mut waits: Vec<(String, Vec<Range<u64>>, Flight)> = vec![];
        let mut issued = Issued { map: self.in_flight.clone(), flights: vec![] };
        {
            let mut map = self.in_flight();
            for (key, mut needs) in by_key {
                needs.sort_by_key(|n| n.range.start);
                let mut joined: Vec<u64> = vec![];
                let mut rest: Vec<Need> = vec![];
                let flights = map.entry(key.clone()).or_default();
                for n in needs {
                    let covering = flights
                        .iter()
                        .find(|f| f.ranges.iter().any(|r| r.start <= n.range.start && n.range.end <= r.end));
                    match covering {
                        Some(f) => {
                            if !joined.contains(&f.id) {
                                joined.push(f.id);
                                crate::metrics::get().fetch_reads_joined.inc();
                                waits.push((key.clone(), f.ranges.clone(), f.flight.clone()));
                            }
                        }
                        None => rest.push(n),
                    }
                }
                if rest.is_empty() {
                    if flights.is_empty() {
                        map.remove(&key);
                    }
                    continue;
                }
                let mut merged: Vec<Range<u64>> = vec![];
                let mut catch_up = true;
                for n in &rest {
                    catch_up &= now_ms.saturating_sub(n.appended_ms) > self.catch_up_age_ms;
                    match merged.last_mut() {
                        Some(last) if n.range.start <= last.end.saturating_add(self.gap) => {
                            last.end = last.end.max(n.range.end)
                        }
                        _ => merged.push(n.range.clone()),
                    }
                }
                let id = self.ids.fetch_add(1, Ordering::Relaxed);
                let flight = self.get(key.clone(), merged.clone(), catch_up);
                flights.push(InFlight { id, ranges: merged.clone(), flight: flight.clone() });
                issued.flights.push((key.clone(), id));
                waits.push((key, merged, flight));
            }
        }
        let done: Vec<Landed> =
            stream::iter(waits.into_iter().map(wait)).buffer_unordered(PARALLEL_OBJECTS).collect().await;
        drop(issued);
        let mut out: HashMap<String, Got> = HashMap::new();
        for (key, ranges, result) in done {
            let got = out.entry(key).or_default();
            match &*result {
                Ok(bytes) if bytes.len() == ranges.len() => {
                    got.extend(ranges.into_iter().zip(bytes.iter().cloned().map(Ok)));
                }
                Ok(_) => got
                    .extend(ranges.into_iter().map(|r| (r, Err("the store answered another number of ranges".into())))),
                Err(e) => got.extend(ranges.into_iter().map(|r| (r, Err(e.clone())))),
            }
        }
        out
    }

    /// One GET of `ranges` of `key`, shareable; a catch-up read first takes its bytes from the
    /// budget (at most the whole budget), released when the GET is done.
    fn get(&self, key: String, ranges: Vec<Range<u64>>, catch_up: bool) -> Flight {
        let storage = self.storage.clone();
        let budget = self.budget.clone();
        let bytes: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        let units = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX).clamp(1, self.budget_units);
        self.gets.fetch_add(1, Ordering::Relaxed);
        let flight = async move {
            let m = crate::metrics::get();
            let _permit = if catch_up {
                m.catch_up_reads.inc();
                budget.acquire_many_owned(units).await.ok() // never closed
            } else {
                None
            };
            if catch_up {
                m.catch_up_read_bytes_in_flight.inc_by(i64::from(units) * UNIT as i64);
            }
            let r = storage.get_ranges(&key, &ranges).await.map_err(|e| e.to_string());
            if catch_up {
                m.catch_up_read_bytes_in_flight.dec_by(i64::from(units) * UNIT as i64);
            }
            Arc::new(r)
        }
        .boxed()
        .shared();
        Flight(flight)
    }

    /// GETs issued so far.
    pub fn gets(&self) -> u64 {
        self.gets.load(Ordering::Relaxed)
    }

    /// The catch-up budget's free units (for tests).
    #[cfg(test)]
    fn budget(&self) -> &Arc<Semaphore> {
        &self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{faulty::Action, faulty::Operation, StorageConfig};
    use std::time::Duration;

    const NOW: i64 = 1_000_000;

    async fn store(objects: &[(&str, usize)]) -> (Storage, Arc<crate::storage::faulty::StoreFaults>) {
        let (storage, faults) = Storage::new(&StorageConfig::Memory).unwrap().with_faults();
        for (key, len) in objects {
            let bytes: Vec<u8> = (0..*len).map(|i| (i % 251) as u8).collect();
            storage.put_new(key, Bytes::from(bytes)).await.unwrap();
        }
        (storage, faults)
    }

    fn need(key: &str, range: Range<u64>, age_ms: i64) -> Need {
        Need { key: key.into(), range, appended_ms: NOW - age_ms }
    }

    fn bytes_of(got: &Got, range: Range<u64>) -> Vec<u8> {
        let (r, b) = got.iter().find(|(r, _)| r.start <= range.start && range.end <= r.end).expect("covered");
        let b = b.as_ref().expect("read");
        b.slice((range.start - r.start) as usize..(range.end - r.start) as usize).to_vec()
    }

    fn expected(range: Range<u64>) -> Vec<u8> {
        range.map(|i| (i % 251) as u8).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn fetches_reading_the_same_ranges_at_once_share_one_get_and_close_ranges_are_one_get() {
        let (storage, faults) = store(&[("wal/a", 10_000)]).await;
        faults.set(&[Operation::Get], Some(Action::Delay(Duration::from_millis(100))), 100);
        let reads = Arc::new(ObjectReads::new(storage, 64, 30_000, 1 << 20));
        let mut tasks = vec![];
        for _ in 0..10 {
            let reads = reads.clone();
            tasks.push(tokio::spawn(async move {
                reads.read(vec![need("wal/a", 100..200, 0), need("wal/a", 220..300, 0)], NOW).await
            }));
        }
        for t in tasks {
            let got = t.await.unwrap();
            let got = &got["wal/a"];
            assert_eq!(bytes_of(got, 100..200), expected(100..200));
            assert_eq!(bytes_of(got, 220..300), expected(220..300));
        }
        assert_eq!(reads.gets(), 1, "ten fetches of the same ranges, 20 bytes apart: one GET");
        assert!(reads.in_flight().is_empty(), "finished flights are forgotten");
        // Once done, a read of the same ranges reads again (caching is the range cache's job);
        // a range far away is a GET of its own.
        let got = reads.read(vec![need("wal/a", 100..200, 0), need("wal/a", 5_000..5_100, 0)], NOW).await;
        assert_eq!(bytes_of(&got["wal/a"], 5_000..5_100), expected(5_000..5_100));
        assert_eq!(reads.gets(), 2, "one GET of two ranges");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_failing_fails_every_fetch_that_shared_it_and_the_next_reads_again() {
        let (storage, faults) = store(&[("wal/a", 1_000)]).await;
        faults.set(&[Operation::Get], Some(Action::Fail), 100);
        let reads = Arc::new(ObjectReads::new(storage, 0, 30_000, 1 << 20));
        let (a, b) = tokio::join!(
            reads.read(vec![need("wal/a", 0..10, 0)], NOW),
            reads.read(vec![need("wal/a", 0..10, 0)], NOW)
        );
        for got in [a, b] {
            assert!(got["wal/a"][0].1.is_err());
        }
        faults.heal_all();
        let got = reads.read(vec![need("wal/a", 0..10, 0)], NOW).await;
        assert_eq!(bytes_of(&got["wal/a"], 0..10), expected(0..10));
    }

    #[tokio::test(start_paused = true)]
    async fn catch_up_reads_wait_for_the_budget_and_tail_reads_never_do() {
        let (storage, _faults) = store(&[("wal/old", 8_192), ("wal/new", 8_192)]).await;
        // A budget of 8 KiB, all of it held (a replay storm in progress).
        let reads = Arc::new(ObjectReads::new(storage, 0, 30_000, 8 << 10));
        let held = reads.budget().clone().acquire_many_owned(8).await.unwrap();
        // A tail read (data a second old) is not held back.
        let got = reads.read(vec![need("wal/new", 0..4_096, 1_000)], NOW).await;
        assert_eq!(bytes_of(&got["wal/new"], 0..4_096), expected(0..4_096));
        // A catch-up read (a minute old) waits for the budget...
        let r = reads.clone();
        let mut catch_up = tokio::spawn(async move { r.read(vec![need("wal/old", 0..4_096, 60_000)], NOW).await });
        assert!(tokio::time::timeout(Duration::from_secs(5), &mut catch_up).await.is_err(), "read past the budget");
        // ...and goes once the budget frees; one larger than the whole budget takes all of it.
        drop(held);
        let got = catch_up.await.unwrap();
        assert_eq!(bytes_of(&got["wal/old"], 0..4_096), expected(0..4_096));
        let got = reads.read(vec![need("wal/old", 0..8_192, 60_000), need("wal/new", 0..8_192, 60_000)], NOW).await;
        assert_eq!(bytes_of(&got["wal/new"], 0..8_192), expected(0..8_192));
        assert_eq!(reads.budget().available_permits(), 8);
    }
}

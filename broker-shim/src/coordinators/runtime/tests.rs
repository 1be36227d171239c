//! The runtime against the fake store: loading, fenced and refused stores, unknown outcomes,
//! batching, release and dropped writes.

use std::sync::Arc;
use std::time::Duration;

use diskless_proto::ErrorCode;

use super::testing::{FakeStore, Next};
use super::{Runtime, Settings};
use crate::error::KafkaError;

type State = Vec<String>;
type Rt = Runtime<String, State, u32>;
type Fake = FakeStore<String, State>;

fn k() -> String {
    "g".to_string()
}

fn runtime(store: &Arc<Fake>, fresh_for: Option<Duration>) -> Arc<Rt> {
    Arc::new(Runtime::new(store.clone(), Settings { fresh_for, ..Settings::default() }, Box::new(|_, _| 7)))
}

fn strings(items: &[&str]) -> State {
    items.iter().map(|s| s.to_string()).collect()
}

/// A write appending `item`; answers the length after it.
fn push(item: &str) -> impl FnMut(&mut Option<State>, &mut u32) -> Result<usize, KafkaError> + Send + 'static {
    let item = item.to_string();
    move |s, _| {
        let s = s.get_or_insert_with(Vec::new);
        s.push(item.clone());
        Ok(s.len())
    }
}

async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..5_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never happened: {what}");
}

/// Starts a write of `item` and holds its store in flight: the gate to open, and the write.
async fn write_held_in_flight(
    store: &Arc<Fake>,
    rt: &Arc<Rt>,
    item: &str,
) -> (Arc<tokio::sync::Notify>, tokio::task::JoinHandle<Result<usize, KafkaError>>) {
    let open = store.hold_next();
    let write = tokio::spawn({
        let (rt, op) = (rt.clone(), push(item));
        async move { rt.write(&k(), op).await }
    });
    until("the store is in flight", || store.gated.load(std::sync::atomic::Ordering::SeqCst)).await;
    (open, write)
}

#[tokio::test]
async fn loads_on_first_use_and_again_when_stale() {
    let store = Arc::new(Fake::default());
    let held = runtime(&store, None);
    held.write(&k(), push("a")).await.unwrap();
    held.write(&k(), push("b")).await.unwrap();
    assert_eq!(store.loads(), 1, "held: read once");
    // Another broker's change is seen by a runtime that reads before every use, and its write
    // computes from it.
    store.put(&k(), strings(&["a", "b", "x"]));
    let every = runtime(&store, Some(Duration::ZERO));
    assert_eq!(every.read(&k(), |s, _| s.map(Vec::len)).await.unwrap(), Some(3));
    assert_eq!(every.write(&k(), push("c")).await.unwrap(), 4);
    assert_eq!(store.loads(), 3);
    assert_eq!(store.get(&k()).unwrap().0, strings(&["a", "b", "x", "c"]));
}

#[tokio::test]
async fn a_fenced_store_reads_again_and_runs_the_write_on_what_the_other_broker_stored() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    rt.write(&k(), push("a")).await.unwrap();
    // Another broker stores between this one's read and its store.
    store.then(Next::OtherStores(strings(&["a", "x"])));
    assert_eq!(rt.write(&k(), push("b")).await.unwrap(), 3);
    assert_eq!(store.get(&k()).unwrap().0, strings(&["a", "x", "b"]), "the other broker's change is kept");
    assert_eq!(store.loads(), 2);
}

#[tokio::test]
async fn a_write_fenced_at_every_try_gives_up_unavailable() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    rt.write(&k(), push("a")).await.unwrap();
    for i in 0..3 {
        store.then(Next::OtherStores(strings(&["other", &i.to_string()])));
    }
    let e = rt.write(&k(), push("b")).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::CoordinatorNotAvailable, "{e:?}");
    assert_eq!(store.get(&k()).unwrap().0, strings(&["other", "2"]));
    // The next write goes through on the state as stored.
    assert_eq!(rt.write(&k(), push("c")).await.unwrap(), 3);
}

#[tokio::test]
async fn an_unknown_outcome_is_answered_unavailable_and_the_next_use_reads_again() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    rt.write(&k(), push("a")).await.unwrap();
    store.then(Next::UnknownAfterApplying);
    assert_eq!(rt.write(&k(), push("b")).await.unwrap_err().code, ErrorCode::CoordinatorNotAvailable);
    // It did apply: the next write reads it and builds on it rather than being fenced forever.
    assert_eq!(rt.write(&k(), push("c")).await.unwrap(), 3);
    assert_eq!(store.get(&k()).unwrap().0, strings(&["a", "b", "c"]));
    assert_eq!(store.loads(), 2);
}

#[tokio::test]
async fn writes_queued_behind_a_store_go_out_as_one_store_each_answered_after_it() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    let (open, first) = write_held_in_flight(&store, &rt, "w0").await;
    let mut queued = vec![];
    for i in 1..=10 {
        let (rt, store) = (rt.clone(), store.clone());
        queued.push(tokio::spawn(async move {
            let item = format!("w{i}");
            let n = rt.write(&k(), push(&item)).await.unwrap();
            assert!(store.get(&k()).unwrap().0.contains(&item), "{item} answered before it was stored");
            n
        }));
    }
    until("ten writes queued", || rt.queued(&k()) == 10).await;
    open.notify_one();
    assert_eq!(first.await.unwrap().unwrap(), 1);
    let mut lengths = vec![];
    for t in queued {
        lengths.push(t.await.unwrap());
    }
    assert_eq!(lengths, (2..=11).collect::<Vec<_>>(), "run in the order they were queued");
    assert_eq!(store.stores(), 2, "ten queued writes, one store");
    assert_eq!(store.get(&k()).unwrap().0.len(), 11);
}

type Write = Box<dyn FnMut(&mut Option<State>, &mut u32) -> Result<usize, KafkaError> + Send>;

/// Holds the first store (of "a") and queues `writes` behind it, in order; answers each.
async fn queued_behind_a_store(store: &Arc<Fake>, rt: &Arc<Rt>, writes: Vec<Write>) -> Vec<Result<usize, KafkaError>> {
    let (open, first) = write_held_in_flight(store, rt, "a").await;
    let mut tasks = vec![];
    for op in writes {
        tasks.push(tokio::spawn({
            let rt = rt.clone();
            async move { rt.write(&k(), op).await }
        }));
        let n = tasks.len();
        until("queued in order", || rt.queued(&k()) == n).await;
    }
    open.notify_one();
    first.await.unwrap().unwrap();
    let mut out = vec![];
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_failed_write_keeps_none_of_its_changes_and_the_others_queued_with_it_are_stored() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    let failing: Write = Box::new(|s, _| {
        s.get_or_insert_with(Vec::new).push("c".into());
        Err(KafkaError::new(ErrorCode::InvalidRequest, "no"))
    });
    let r = queued_behind_a_store(&store, &rt, vec![Box::new(push("b")), failing, Box::new(push("d"))]).await;
    assert_eq!(r[0], Ok(2));
    assert_eq!(r[1].as_ref().unwrap_err().code, ErrorCode::InvalidRequest);
    assert_eq!(r[2], Ok(3));
    assert_eq!(store.get(&k()).unwrap().0, strings(&["a", "b", "d"]));
    assert_eq!(store.stores(), 2);
}

#[tokio::test]
async fn a_change_the_store_refuses_fails_alone_and_the_rest_of_its_batch_is_stored() {
    let store = Arc::new(Fake::default());
    store.refuse_when(|s: &State| s.iter().any(|i| i == "bad"));
    let rt = runtime(&store, None);
    let r =
        queued_behind_a_store(&store, &rt, vec![Box::new(push("x")), Box::new(push("bad")), Box::new(push("y"))]).await;
    assert_eq!(r[0], Ok(2));
    assert_eq!(r[1].as_ref().unwrap_err().code, ErrorCode::InvalidRecordState);
    assert_eq!(r[2], Ok(3));
    assert_eq!(store.get(&k()).unwrap().0, strings(&["a", "x", "y"]));
}

#[tokio::test]
async fn a_write_that_changes_only_the_in_memory_part_is_answered_without_a_store() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    rt.write(&k(), push("a")).await.unwrap();
    let v = rt
        .write(&k(), |_, v: &mut u32| {
            *v += 1;
            Ok(*v)
        })
        .await
        .unwrap();
    assert_eq!(v, 8, "the in-memory part started at what on_load gave");
    assert_eq!(store.stores(), 1);
    assert_eq!(rt.read(&k(), |_, v| *v).await.unwrap(), 8);
    // Nothing stored and nothing created: nothing to store either.
    assert!(rt.write(&"none".to_string(), |s, _| Ok(s.is_none())).await.unwrap());
    assert_eq!(store.stores(), 1);
}

#[tokio::test]
async fn a_released_key_is_read_again_and_its_in_memory_part_starts_anew() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    rt.write(&k(), |s, v: &mut u32| {
        s.get_or_insert_with(Vec::new).push("a".into());
        *v = 100;
        Ok(())
    })
    .await
    .unwrap();
    rt.write(&"other".to_string(), push("o")).await.unwrap();
    assert_eq!(rt.held().len(), 2);
    rt.release_unless(|key| key != "g");
    assert_eq!(rt.held(), vec!["other".to_string()]);
    assert_eq!(rt.read(&k(), |s, v| (s.cloned(), *v)).await.unwrap(), (Some(strings(&["a"])), 7));
    assert_eq!(store.loads(), 3);
    rt.release(&k());
    assert!(!rt.held().contains(&k()));
}

#[tokio::test]
async fn a_write_whose_caller_went_away_before_it_ran_is_never_run() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    let (open, first) = write_held_in_flight(&store, &rt, "a").await;
    let gone = tokio::spawn({
        let rt = rt.clone();
        async move { rt.write(&k(), push("gone")).await }
    });
    until("queued", || rt.queued(&k()) == 1).await;
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    open.notify_one();
    first.await.unwrap().unwrap();
    assert_eq!(rt.write(&k(), push("b")).await.unwrap(), 2);
    assert_eq!(store.get(&k()).unwrap().0, strings(&["a", "b"]));
}

#[tokio::test]
async fn a_write_dropped_while_its_store_is_in_flight_leaves_the_key_to_be_read_again() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    rt.write(&k(), push("a")).await.unwrap();
    let (open, dropped) = write_held_in_flight(&store, &rt, "lost").await;
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    drop(open);
    // Nothing half-held: the next write reads the state again and stores over it.
    assert_eq!(rt.write(&k(), push("b")).await.unwrap(), 2);
    assert_eq!(store.get(&k()).unwrap().0, strings(&["a", "b"]));
    assert_eq!(store.loads(), 2);
}

#[tokio::test]
async fn peek_reads_only_a_held_state_and_takes_nothing_over() {
    let store = Arc::new(Fake::default());
    store.put(&k(), strings(&["a"]));
    let rt = runtime(&store, None);
    assert_eq!(rt.peek(&k(), |s, _| s.cloned()).await, None, "not held: nothing read");
    assert_eq!((store.loads(), rt.held().len()), (0, 0));
    rt.write(&k(), push("b")).await.unwrap();
    assert_eq!(rt.peek(&k(), |s, v| (s.cloned(), *v)).await, Some((Some(strings(&["a", "b"])), 7)));
    // A state to be read again (its store's outcome unknown) is not answered from memory.
    store.then(Next::UnknownAfterApplying);
    assert_eq!(rt.write(&k(), push("c")).await.unwrap_err().code, ErrorCode::CoordinatorNotAvailable);
    assert_eq!(rt.peek(&k(), |s, _| s.cloned()).await, None);
}

#[tokio::test]
async fn a_timer_write_runs_only_on_a_key_held_here() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    assert!(rt.write_if_held(&k(), push("a")).await.is_none());
    assert_eq!((store.loads(), store.stores()), (0, 0), "a released key is not taken over by a timer");
    rt.write(&k(), push("a")).await.unwrap();
    assert_eq!(rt.write_if_held(&k(), push("b")).await.map(Result::unwrap), Some(2));
    rt.release(&k());
    assert!(rt.write_if_held(&k(), push("c")).await.is_none());
    assert_eq!(store.get(&k()).unwrap().0, strings(&["a", "b"]));
}

#[tokio::test]
async fn a_key_with_nothing_stored_is_not_kept_after_its_write() {
    let store = Arc::new(Fake::default());
    let rt = runtime(&store, None);
    let refuse = |_: &mut Option<State>, _: &mut u32| -> Result<(), KafkaError> {
        Err(KafkaError::new(ErrorCode::GroupIdNotFound, "no such group"))
    };
    assert_eq!(rt.write(&k(), refuse).await.unwrap_err().code, ErrorCode::GroupIdNotFound);
    assert!(rt.held().is_empty(), "an unknown key leaves nothing behind");
    rt.write(&k(), push("a")).await.unwrap();
    assert_eq!(rt.held(), vec![k()]);
}

#[tokio::test]
async fn a_load_refused_as_such_answers_the_stores_code_not_the_load_failure() {
    let store = Arc::new(Fake::default());
    store.put(&k(), strings(&["other kind"]));
    store.refuse_loads_of(|s| s.first().is_some_and(|x| x == "other kind"));
    let rt = runtime(&store, None);
    assert_eq!(rt.write(&k(), push("a")).await.unwrap_err().code, ErrorCode::GroupIdNotFound);
    assert_eq!(rt.read(&k(), |s, _| s.cloned()).await.unwrap_err().code, ErrorCode::GroupIdNotFound);
    assert_eq!(store.stores(), 0);
}

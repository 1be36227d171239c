use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use diskless_proto::v1::list_files_to_delete_response::FileToDelete;
use diskless_proto::v1::ListFilesToDeleteResponse;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use super::*;
use crate::storage::StorageConfig;

/// A coordinator cluster that lists what the test says and fences as the test says (FENCED by
/// default), recording every call.
#[derive(Default)]
struct Fake {
    listed: Mutex<ListFilesToDeleteResponse>,
    answers: Mutex<HashMap<String, Fence>>,
    fences: Mutex<Vec<Vec<(String, Vec<u32>)>>>,
    confirmed: Mutex<Vec<String>>,
}

impl CleanupClient for Fake {
    fn files_to_delete(&self, _limit: usize) -> BoxFuture<'_, anyhow::Result<ListFilesToDeleteResponse>> {
        async move { Ok(self.listed.lock().unwrap().clone()) }.boxed()
    }

    fn fence(&self, objects: Vec<(String, Vec<u32>)>) -> BoxFuture<'_, anyhow::Result<Vec<Fence>>> {
        async move {
            let answers = self.answers.lock().unwrap().clone();
            let out = objects.iter().map(|(k, _)| answers.get(k).cloned().unwrap_or(Fence::Fenced)).collect();
            self.fences.lock().unwrap().push(objects);
            Ok(out)
        }
        .boxed()
    }

    fn confirm(&self, object_keys: Vec<String>) -> BoxFuture<'_, anyhow::Result<Vec<(String, String)>>> {
        async move {
            self.confirmed.lock().unwrap().extend(object_keys);
            Ok(vec![])
        }
        .boxed()
    }
}

fn released(key: &str, at: i64, group: u32, owners: &[i32]) -> FileToDelete {
    FileToDelete {
        object_key: key.into(),
        marked_for_deletion_at: at,
        file_size: 10,
        owner_ids: owners.to_vec(),
        metadata_partition: group,
    }
}

async fn setup(keys: &[&str], orphan_grace_ms: u64) -> (Cleaner, Arc<Fake>, Storage) {
    let storage = Storage::new(&StorageConfig::Memory).unwrap();
    for k in keys {
        storage.put_new(k, Bytes::from_static(b"\0segment")).await.unwrap();
    }
    let fake = Arc::new(Fake::default());
    let config = CleanupConfig { delete_grace_ms: 60_000, orphan_grace_ms, ..CleanupConfig::default() };
    let cleaner = Cleaner::new(config, storage.clone(), fake.clone(), "wal/".into());
    (cleaner, fake, storage)
}

async fn exists(storage: &Storage, key: &str) -> bool {
    storage.list("wal/").await.unwrap().iter().any(|o| o.key == key)
}

#[tokio::test]
async fn the_grace_period_counts_from_the_latest_release_the_fence_reports_not_the_listed_one() {
    let (cleaner, fake, storage) = setup(&["wal/split"], 600_000).await;
    let hour_ago = now_ms() - 3_600_000;
    // Metadata partition 0 released it an hour ago; partition 1's later release is past the
    // truncated page.
    fake.listed.lock().unwrap().files = vec![released("wal/split", hour_ago, 0, &[0, 1])];
    fake.answers.lock().unwrap().insert("wal/split".into(), Fence::Released { at: now_ms() - 1_000 });
    let s = cleaner.delete_released().await.unwrap();
    assert_eq!((s.deleted, s.kept), (0, 1));
    assert!(exists(&storage, "wal/split").await, "released a second ago: readers may still fetch from it");
    assert_eq!(fake.fences.lock().unwrap()[0], [("wal/split".to_string(), vec![0, 1])], "fenced in its owners");
    assert!(fake.confirmed.lock().unwrap().is_empty());

    fake.answers.lock().unwrap().insert("wal/split".into(), Fence::Released { at: hour_ago });
    let s = cleaner.delete_released().await.unwrap();
    assert_eq!(s.deleted, 1);
    assert!(!exists(&storage, "wal/split").await);
    assert_eq!(*fake.confirmed.lock().unwrap(), ["wal/split"]);
}

#[tokio::test]
async fn only_files_every_owner_fenced_are_deleted_and_a_silent_partition_does_not_stop_the_rest() {
    let keys = ["wal/live", "wal/unanswered", "wal/done", "wal/young", "wal/legacy"];
    let (cleaner, fake, storage) = setup(&keys, 600_000).await;
    let old = now_ms() - 3_600_000;
    {
        let mut l = fake.listed.lock().unwrap();
        l.files = vec![
            released("wal/live", old, 0, &[0, 1]),
            released("wal/unanswered", old, 0, &[0, 2]),
            released("wal/done", old, 1, &[1]),
            released("wal/young", now_ms(), 1, &[1]),
            // Recorded before owners were checked: its owners do not name its partition.
            released("wal/legacy", old, 3, &[]),
        ];
        l.unavailable_metadata_partitions = vec![2];
    }
    {
        let mut a = fake.answers.lock().unwrap();
        a.insert("wal/live".into(), Fence::Live);
        a.insert("wal/unanswered".into(), Fence::Unknown("partition 2 did not answer".into()));
        a.insert("wal/done".into(), Fence::Released { at: old });
    }
    let s = cleaner.delete_released().await.unwrap();
    assert_eq!((s.deleted, s.kept), (2, 3));
    let left: Vec<String> = storage.list("wal/").await.unwrap().into_iter().map(|o| o.key).collect();
    assert_eq!(left, ["wal/live", "wal/unanswered", "wal/young"]);
    let fenced = fake.fences.lock().unwrap()[0].clone();
    assert!(!fenced.iter().any(|(k, _)| k == "wal/young"), "not fenced before its grace could have passed");
    assert!(
        fenced.contains(&("wal/legacy".to_string(), vec![])),
        "a file without trustworthy owners is fenced everywhere"
    );
    assert_eq!(*fake.confirmed.lock().unwrap(), ["wal/done", "wal/legacy"]);
}

#[tokio::test]
async fn orphans_are_fenced_everywhere_before_deletion_a_page_of_the_listing_at_a_time() {
    let keys: Vec<String> = (0..2 * PAGE + 5).map(|i| format!("wal/{i:05}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let (cleaner, fake, storage) = setup(&refs, 0).await;
    fake.answers.lock().unwrap().insert("wal/00007".into(), Fence::Live);
    fake.answers.lock().unwrap().insert("wal/01500".into(), Fence::Released { at: 0 });
    fake.answers.lock().unwrap().insert("wal/02001".into(), Fence::Unknown("no quorum".into()));
    let s = cleaner.delete_orphans().await.unwrap();
    assert_eq!((s.deleted, s.kept), (2 * PAGE + 2, 3));
    let left: Vec<String> = storage.list("wal/").await.unwrap().into_iter().map(|o| o.key).collect();
    assert_eq!(left, ["wal/00007", "wal/01500", "wal/02001"]);
    let calls = fake.fences.lock().unwrap().clone();
    assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [PAGE, PAGE, 5]);
    assert!(calls.iter().flatten().all(|(_, groups)| groups.is_empty()), "orphans are fenced in every partition");
}

#[tokio::test]
async fn grace_periods_and_times_of_any_value_keep_files_instead_of_panicking() {
    let (mut cleaner, fake, storage) = setup(&["wal/a", "wal/b", "wal/c"], u64::MAX).await;
    fake.listed.lock().unwrap().files = vec![
        released("wal/a", i64::MIN, u32::MAX, &[i32::MIN, -1, i32::MAX]),
        released("wal/b", i64::MAX, 0, &[]),
        released("wal/c", i64::MIN, 0, &[0]),
    ];
    fake.answers.lock().unwrap().insert("wal/a".into(), Fence::Live);
    fake.answers.lock().unwrap().insert("wal/c".into(), Fence::Released { at: i64::MAX });
    // Grace periods past the clock's past (2^63 ms and more overflowed the cutoff's arithmetic).
    for grace in [1 << 63, u64::MAX] {
        cleaner.config.delete_grace_ms = grace;
        let s = cleaner.delete_released().await.unwrap();
        assert_eq!(s.deleted, 0, "grace {grace}");
    }
    // Released at the dawn of time, per the listing, but live or just released per the fence.
    cleaner.config.delete_grace_ms = 0;
    assert_eq!(cleaner.delete_released().await.unwrap().deleted, 0);
    let s = cleaner.delete_orphans().await.unwrap();
    assert_eq!((s.deleted, s.kept), (0, 3));
    assert_eq!(storage.list("wal/").await.unwrap().len(), 3);
}

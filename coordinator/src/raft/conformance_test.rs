//! openraft's storage conformance suite against our RocksDB log store and state machine store.

use std::sync::Arc;

use super::{LogStore, SmStore, TypeConfig, WalSyncer};
use crate::state_machine::StateMachine;
use crate::storage::Db;

struct Builder;

impl openraft::testing::log::StoreBuilder<TypeConfig, LogStore, SmStore, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, SmStore), openraft::StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Arc::new(Db::open(&dir.path().join("db")).expect("open db"));
        let syncer = WalSyncer::start(db.clone(), Default::default());
        let log = LogStore::new(db.clone(), 3, syncer);
        let sm = SmStore::open(db, StateMachine::new(3, 8), dir.path()).expect("open state machine");
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_and_state_machine_stores_pass_openraft_conformance_suite() -> Result<(), openraft::StorageError<TypeConfig>>
{
    openraft::testing::log::Suite::test_all(Builder).await
}

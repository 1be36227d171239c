//! openraft's storage conformance suite against our log store (the segmented log, with its vote
//! and purge point in RocksDB) and our state machine store (RocksDB).

use super::{LogStore, SmStore, TypeConfig};
use crate::state_machine::StateMachine;

struct Builder;

impl openraft::testing::log::StoreBuilder<TypeConfig, LogStore, SmStore, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, SmStore), openraft::StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = super::home::test_home(dir.path(), 3);
        let log = LogStore::new(home.clone());
        let sm = SmStore::open(home, StateMachine::new(3, 8)).expect("open state machine");
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_and_state_machine_stores_pass_openraft_conformance_suite() -> Result<(), openraft::StorageError<TypeConfig>>
{
    openraft::testing::log::Suite::test_all(Builder).await
}

//! Backups of a cluster's metadata, and the offline tools that work on data directories.
//!
//! Owns: the backup file format ([`file`]: every metadata partition's state as streamed by its
//! leader, with a header and an end checksum), building a new cluster's data directory from a
//! backup ([`restore`]), and dumping a stopped node's data directory ([`inspect`]). The streaming
//! itself is `AdminService.StreamSnapshot` (server) and `coordctl snapshot save` (ctl). It must
//! not run against a live node's directory (RocksDB's lock refuses it) nor change a source
//! cluster.

pub mod file;
pub mod inspect;
pub mod restore;

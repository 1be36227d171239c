//! Placeholder: the broker shim arrives with its own issue (WAL segments, object storage, produce/fetch).

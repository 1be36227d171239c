//! What the Kafka handlers ask the group coordinator and what they are told: the decoded
//! JoinGroup, the join and sync outcomes members wait for, a group as DescribeGroups shows it.
//! Plain data; no behaviour.

use bytes::Bytes;
use diskless_proto::ErrorCode;

/// A JoinGroup as the handler decoded it.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+ (KIP-394): a member without an id is given one with MEMBER_ID_REQUIRED and
    /// joins again with it.
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone, Default)]
pub struct JoinOutcome {
    pub error: ErrorCode,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only for the leader: every member with its metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

#[derive(Debug, Clone, Default)]
pub struct SyncOutcome {
    pub error: ErrorCode,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Bytes,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct Described {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    /// member id, instance id, client id, client host, metadata, assignment.
    pub members: Vec<(String, Option<String>, String, String, Bytes, Bytes)>,
}

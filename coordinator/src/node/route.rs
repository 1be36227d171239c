//! Routing: running a command ([`Write`]), a strict read ([`Read`]) or a membership or leadership
//! change ([`Change`]) on the leader of metadata partition `g`. When this node leads `g` it runs
//! here; otherwise the typed request — already converted from the client's wire request — is
//! forwarded once, bincode-encoded like the Raft log's commands, over the peers'
//! `RaftService.Execute`, and the leader runs it here too (the receiver never forwards again: a
//! replica that does not lead answers [`RouteError::NotLeader`], nothing applied). The caller's
//! timeout travels with it and bounds the call. A request that finds no leader, or whose leader no
//! longer leads, is asked again (nothing was applied; an election or a leadership transfer is
//! riding through): at once of the leader the answering replica named, if it named another (a few
//! hops at most), else once this node knows another leader, for at most a few seconds (a change
//! waits longer, and also when this node's own leadership moved under it: changes are what move
//! leaders).
//!
//! Owns: where a request runs, the forwarding call, its metrics (`forwarded`) and the fault
//! injection cut (`Faults::is_blocked`), and what a forwarded failure means: a request that may
//! have been delivered has an unknown outcome ([`RouteError::Timeout`]), never "not applied".
//! It must not know the wire API (that is `server`: splitting a request by metadata partition,
//! converting it, merging the answers) nor interpret commands (that is `state_machine`); serving
//! a request here is `propose`, `commit`, `reads` and `membership`.

use std::time::{Duration, Instant};

use diskless_proto::internal::raft_service_client::RaftServiceClient;
use diskless_proto::internal::{ExecuteReply, ExecuteRequest};
use serde::{Deserialize, Serialize};

use super::{Node, RouteError, CHANGE_TIMEOUT};
use crate::raft::NodeId;
use crate::state_machine::{
    AclBinding, AclFilter, BrokerRecord, Failure, FileState, FileToCommit, FileToDelete, GroupRecord,
    OffsetAndTimestamp, OffsetRecord, Op, Outcome, ProducerDescription, ShareStateRecord, TopicInfo, TopicPartition,
    TxnRecord,
};
use crate::storage::codec;

/// How much longer than the request's own timeout a forwarded call may take (the leader answers
/// "timed out" itself within the timeout; this only bounds a leader that went silent).
const FORWARD_GRACE: Duration = Duration::from_secs(5);
/// The timeout of a forwarded request that names none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request waits, at most, for this node to learn of a new leader when the leader is
/// unknown or the one asked no longer leads (about two elections with the default timeouts).
const LEADER_WAIT: Duration = Duration::from_secs(3);
/// The same for a [`Change`]: an operator's call, often made while leaders move (removing the
/// node that leads).
const CHANGE_LEADER_WAIT: Duration = Duration::from_secs(10);
/// How often it looks while waiting.
const LEADER_POLL: Duration = Duration::from_millis(20);
/// How many times in a row a request follows a leader named by the replica it asked before it
/// waits for this node to learn of one (two replicas naming each other must not ping-pong).
const MAX_HINTS: u32 = 3;

/// Where a request may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// On the metadata partition's leader: here when this node leads it, else forwarded once.
    Leader,
    /// Here, never forwarded: the client asked so (`x-diskless-local`). A replica that does not
    /// lead answers NotLeader.
    Here,
}

/// A command for a metadata partition's leader. Its result: the outcome and the log index it
/// applied at.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Write {
    /// One log entry of its own ([`Node::propose`]).
    Propose(Op),
    /// A file's part with each batch's transactional flag, gathered with the partition's
    /// concurrent commits ([`Node::commit`]); answered as [`Outcome::CommitFile`].
    Commit(FileToCommit),
}

/// A strict read, served by a metadata partition's leader once it may serve linearizable reads
/// ([`Node::linearizable`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Read {
    /// ListOffsets: per (partition, timestamp).
    ListOffsets(Vec<(TopicPartition, i64)>),
    /// DescribeFiles: per object key.
    DescribeFiles(Vec<String>),
    /// ListFilesToDelete: at most `limit`.
    FilesToDelete { limit: u64 },
    /// The topic catalog.
    Topics,
    /// OffsetFetch: of `partitions`, or all of the consumer group's when empty; with the consumer
    /// group's record.
    FetchOffsets { group_id: String, partitions: Vec<TopicPartition> },
    /// Every consumer group of the metadata partition.
    ListConsumerGroups,
    /// The brokers whose lease has not ended, judged by the leader's clock (`now_ms`).
    LiveBrokers,
    /// DescribeAcls: the bindings matching the filter.
    Acls(AclFilter),
    /// ListOffsets with `read_committed` (answered as [`Answer::ListOffsets`]).
    ListOffsetsCommitted(Vec<(TopicPartition, i64)>),
    /// The stored state of these transactional ids.
    Transactions(Vec<String>),
    /// Every transactional id of the metadata partition.
    ListTransactions,
    /// DescribeProducers: per partition.
    Producers(Vec<TopicPartition>),
    /// A share group's share-partition states: every one, or `only` this partition's.
    ShareStates { group_id: String, only: Option<TopicPartition> },
}

/// A [`Read`]'s answer (the variant of the same name).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Answer {
    ListOffsets(Vec<Result<OffsetAndTimestamp, Failure>>),
    DescribeFiles(Vec<FileState>),
    FilesToDelete(Vec<FileToDelete>),
    Topics(Vec<TopicInfo>),
    FetchOffsets { offsets: Vec<(TopicPartition, Option<OffsetRecord>)>, consumer_group: Option<GroupRecord> },
    ListConsumerGroups(Vec<(String, Option<GroupRecord>)>),
    LiveBrokers { brokers: Vec<(i32, BrokerRecord)>, now_ms: i64, generation: u64 },
    Acls(Result<Vec<AclBinding>, Failure>),
    Transactions(Vec<Option<TxnRecord>>),
    ListTransactions(Vec<(String, TxnRecord)>),
    Producers(Vec<Result<Vec<ProducerDescription>, Failure>>),
    ShareStates(Vec<(TopicPartition, ShareStateRecord)>),
}

/// A change of a metadata partition's membership or leadership, made by its leader
/// (`membership`); answered with a line of progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Change {
    /// AddNode: as a learner until caught up, then a voter.
    AddNode { id: NodeId, addr: String },
    /// RemoveNode.
    RemoveNode { id: NodeId },
    /// TransferLeader: the leader hands leadership to `to`.
    TransferLeader { to: NodeId },
}

/// What `Execute` carries (bincode; public for tests that speak `Execute` themselves).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Routed {
    Write(Write),
    Read(Read),
    Change(Change),
}

/// What `Execute` answers (inside a `Result<_, RouteError>`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Served {
    Written(Outcome, u64),
    Read(Answer),
    Changed(String),
}

impl Routed {
    /// How long a request that meets no leader, or a leader that no longer leads, waits for this
    /// node to learn of another.
    fn leader_wait(&self) -> Duration {
        match self {
            Routed::Change(_) => CHANGE_LEADER_WAIT,
            Routed::Write(_) | Routed::Read(_) => LEADER_WAIT,
        }
    }

    /// Whether "not the leader" from this node's own replica is asked again elsewhere too (a
    /// change may itself have moved the leader; nothing of it was applied).
    fn retries_here(&self) -> bool {
        matches!(self, Routed::Change(_))
    }
}

impl Node {
    /// Runs `w` on `g`'s leader (see the module's documentation).
    pub async fn on_leader(&self, g: u32, w: Write, timeout: Duration, hop: Hop) -> Result<(Outcome, u64), RouteError> {
        match self.route(g, Routed::Write(w), timeout, hop).await? {
            Served::Written(outcome, index) => Ok((outcome, index)),
            other => Err(RouteError::unexpected(g, &other)),
        }
    }

    /// Serves `r` on `g`'s leader (see the module's documentation).
    pub async fn read_on_leader(&self, g: u32, r: Read, timeout: Duration, hop: Hop) -> Result<Answer, RouteError> {
        match self.route(g, Routed::Read(r), timeout, hop).await? {
            Served::Read(answer) => Ok(answer),
            other => Err(RouteError::unexpected(g, &other)),
        }
    }

    /// Runs `c` on `g`'s leader (see the module's documentation), within [`CHANGE_TIMEOUT`].
    pub async fn change_on_leader(&self, g: u32, c: Change) -> Result<String, RouteError> {
        match self.route(g, Routed::Change(c), CHANGE_TIMEOUT, Hop::Leader).await? {
            Served::Changed(progress) => Ok(progress),
            other => Err(RouteError::unexpected(g, &other)),
        }
    }

    async fn route(&self, g: u32, routed: Routed, timeout: Duration, hop: Hop) -> Result<Served, RouteError> {
        let start = Instant::now();
        let wait_until = start + routed.leader_wait().min(timeout);
        // A leader named by the replica that answered "not the leader", asked next.
        let mut hint: Option<NodeId> = None;
        let mut hints_followed = 0;
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            let to = hint.take().filter(|h| *h != self.id);
            let (tried, result) = if to.is_none() && (hop == Hop::Here || self.raft(g)?.is_leader()) {
                if hop == Hop::Here || !routed.retries_here() {
                    return self.serve_here(g, routed, left).await;
                }
                (Some((self.id, true)), self.serve_here(g, routed.clone(), left).await)
            } else {
                self.forward(g, &routed, left, to).await
            };
            // Nothing was applied, and the leader is unknown here or the one asked no longer leads:
            // an election or a leadership transfer is under way. Ask again once this node knows
            // another leader, within the caller's timeout and the request's leader wait (a
            // partition that elects none in that time fails as before, only later). A leader that
            // cannot be reached fails at once, as before.
            let retry = match &result {
                Err(RouteError::NotLeader { .. }) => tried.is_none_or(|(_, sent)| sent),
                _ => false,
            };
            if !retry {
                return result;
            }
            let tried = tried.map(|(id, _)| id);
            // The replica asked named another leader (it knows of a newer one than this node, or
            // this node's own replica was handing over): ask that one at once, a few hops at most.
            if let Err(RouteError::NotLeader { leader: Some((named, _)), .. }) = &result {
                if Some(*named) != tried && hints_followed < MAX_HINTS && Instant::now() < wait_until {
                    hints_followed += 1;
                    hint = Some(*named);
                    continue;
                }
            }
            loop {
                if Instant::now() + LEADER_POLL >= wait_until {
                    return result;
                }
                tokio::time::sleep(LEADER_POLL).await;
                if self.raft(g)?.is_leader() || self.leader(g).map(|(id, _)| id).is_some_and(|id| Some(id) != tried) {
                    break;
                }
            }
        }
    }

    /// Forwards `routed` to `g`'s leader: `to` when named (a leader another replica named), else
    /// the leader as this node knows it. Returns the leader asked and whether the request reached
    /// it (`None`: no leader known here), and the answer.
    #[allow(clippy::type_complexity)]
    async fn forward(
        &self,
        g: u32,
        routed: &Routed,
        timeout: Duration,
        to: Option<NodeId>,
    ) -> (Option<(NodeId, bool)>, Result<Served, RouteError>) {
        let target = match to {
            Some(id) => self.replica_of(g, id).map(|r| (id, r)),
            None => self.leader_replica(g),
        };
        let Some((leader, replica)) = target.filter(|(id, _)| *id != self.id) else {
            return (None, Err(RouteError::NotLeader { partition: g, leader: None }));
        };
        let (addr, incarnation) = (replica.addr, replica.incarnation);
        if self.peers.faults.is_blocked(leader) {
            // A cut network (fault injection): as when the connection cannot be made.
            return (Some((leader, false)), Err(RouteError::NotLeader { partition: g, leader: Some((leader, addr)) }));
        }
        let not_sent = || RouteError::NotLeader { partition: g, leader: Some((leader, addr.clone())) };
        let channel = match self.peers.channel(&addr) {
            Ok(c) => c,
            Err(_) => return (Some((leader, false)), Err(not_sent())),
        };
        let payload = match codec::encode(routed) {
            Ok(p) => p,
            Err(e) => {
                return (
                    Some((leader, false)),
                    Err(RouteError::Failed { partition: g, message: format!("encoding: {e}") }),
                )
            }
        };
        // At least 1 ms: 0 would mean "no timeout named" to the receiver.
        let timeout_ms = timeout.as_millis().clamp(1, u128::from(u32::MAX)) as u32;
        let to = Some(self.identity().addressee(leader, incarnation));
        let mut request = tonic::Request::new(ExecuteRequest { group: g, payload, timeout_ms, to });
        request.set_timeout(timeout + FORWARD_GRACE);
        let r = RaftServiceClient::new(channel)
            .max_decoding_message_size(256 << 20)
            .max_encoding_message_size(256 << 20)
            .execute(request)
            .await;
        let result = if r.is_ok() { "ok" } else { "failed" };
        crate::metrics::get()
            .forwarded
            .get_or_create(&crate::metrics::PartitionResult { metadata_partition: g, result })
            .inc();
        let answer = match r {
            Ok(reply) => {
                match codec::decode::<Result<Served, RouteError>>(b"execute reply", &reply.into_inner().payload) {
                    Ok(served) => served,
                    Err(e) => {
                        tracing::warn!(metadata_partition = g, leader, error = %e, "undecodable answer of a forwarded request");
                        Err(RouteError::Timeout { partition: g })
                    }
                }
            }
            // Delivered or not, we cannot tell (gRPC reports a reset or keep-alive failure after
            // delivery as UNAVAILABLE too): the outcome is unknown, as for a timeout.
            Err(s) => {
                tracing::debug!(metadata_partition = g, leader, status = %s, "forwarded request failed");
                Err(RouteError::Timeout { partition: g })
            }
        };
        (Some((leader, true)), answer)
    }

    /// The receiving end of `Execute`: runs a forwarded request here (never forwarding again).
    /// An undecodable request is refused (nothing run); so is one that does not name this node's
    /// replica of the partition as its addressee, or names another node, replica or cluster
    /// (answered "not the leader": a sender whose view of the membership is wrong retries
    /// elsewhere, and nothing of another cluster's is applied here).
    pub async fn execute(&self, request: ExecuteRequest) -> Result<ExecuteReply, tonic::Status> {
        let routed: Routed = codec::decode(b"execute request", &request.payload)
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        let timeout = match request.timeout_ms {
            0 => DEFAULT_TIMEOUT,
            ms => Duration::from_millis(u64::from(ms)),
        };
        let g = request.group;
        let admitted = request.to.as_ref().is_some_and(|to| self.identity().admit_forwarded(g, to).is_ok());
        let served = if admitted {
            self.serve_here(g, routed, timeout).await
        } else {
            Err(RouteError::NotLeader { partition: g, leader: None })
        };
        let payload = codec::encode(&served).map_err(|e| tonic::Status::internal(e.to_string()))?;
        Ok(ExecuteReply { payload })
    }

    async fn serve_here(&self, g: u32, routed: Routed, timeout: Duration) -> Result<Served, RouteError> {
        match routed {
            Routed::Write(Write::Propose(op)) => {
                let (outcome, index) = self.propose(g, op, timeout).await?;
                Ok(Served::Written(outcome, index))
            }
            Routed::Write(Write::Commit(file)) => {
                let (rs, index) = self.commit(g, file, timeout).await?;
                Ok(Served::Written(Outcome::CommitFile(rs), index))
            }
            Routed::Read(r) => Ok(Served::Read(self.serve_read(g, r, timeout).await?)),
            Routed::Change(c) => Ok(Served::Changed(self.change_here(g, c).await?)),
        }
    }
}

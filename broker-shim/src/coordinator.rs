//! The coordinator cluster as the broker sees it: any node serves any request, so requests go to
//! one node and move to the next when it cannot be reached. Also keeps the topic catalog (names to
//! ids, refreshed on a miss) and the highest Raft index this broker's commits were applied at per
//! metadata partition, which its FindBatches pass on so the broker reads its own writes from any
//! replica.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::StatusRequest;
use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::*;
use tonic::transport::{Channel, Endpoint};

pub type Client = CoordinatorServiceClient<Channel>;

/// A topic as the catalog holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    pub id: [u8; 16],
    pub name: String,
    pub partitions: i32,
}

pub struct Coordinators {
    channels: Vec<(String, Channel)>,
    current: AtomicUsize,
    topics: Mutex<HashMap<String, TopicMeta>>,
    applied: Mutex<HashMap<u32, u64>>,
    num_groups: u32,
    /// Each metadata partition's leader as last learned (AdminService.Status), for sending each
    /// part of a commit straight to its leader.
    leaders: Mutex<Vec<Option<String>>>,
    by_addr: Mutex<HashMap<String, Channel>>,
    /// Addresses to reach nodes through instead of those they advertise (see
    /// `ShimConfig::coordinator_address_map`).
    address_map: HashMap<String, String>,
    /// TLS to the nodes (`ShimConfig::coordinator_tls`).
    tls: Option<Arc<diskless_tls::ClientTls>>,
}

/// The header that makes a node serve every part of a request itself (no forwarding).
const LOCAL_HEADER: &str = "x-diskless-local";

/// Transport-level failures worth trying on another node.
fn retry_elsewhere(s: &tonic::Status) -> bool {
    matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
}

impl Coordinators {
    /// Connects (lazily) to the nodes and learns the number of metadata partitions.
    pub async fn connect(addrs: &[String]) -> anyhow::Result<Coordinators> {
        Self::connect_via(addrs, HashMap::new()).await
    }

    /// Like [`Coordinators::connect`], reaching a node advertised at a key of `address_map`
    /// through that key's value.
    pub async fn connect_via(addrs: &[String], address_map: HashMap<String, String>) -> anyhow::Result<Coordinators> {
        Self::connect_with(addrs, address_map, None).await
    }

    /// Like [`Coordinators::connect_via`], over TLS with `tls`.
    pub async fn connect_with(
        addrs: &[String],
        address_map: HashMap<String, String>,
        tls: Option<Arc<diskless_tls::ClientTls>>,
    ) -> anyhow::Result<Coordinators> {
        let mut channels = vec![];
        for a in addrs {
            let endpoint = Endpoint::from_shared(format!("http://{a}"))?
                .connect_timeout(Duration::from_secs(2))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(10));
            let ch = diskless_tls::client::channel(endpoint, tls.clone());
            channels.push((a.clone(), ch));
        }
        let mut num_groups = 0;
        let mut last_err = None;
        for _ in 0..60 {
            for (a, ch) in &channels {
                match AdminServiceClient::new(ch.clone())
                    .status(StatusRequest { with_digest: false, ..Default::default() })
                    .await
                {
                    Ok(s) => {
                        num_groups = s.into_inner().num_metadata_partitions;
                        break;
                    }
                    Err(e) => last_err = Some(format!("{a}: {e}")),
                }
            }
            if num_groups > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        anyhow::ensure!(num_groups > 0, "no coordinator answered: {last_err:?}");
        let by_addr = channels.iter().cloned().collect();
        let c = Coordinators {
            channels,
            current: AtomicUsize::new(0),
            topics: Mutex::new(HashMap::new()),
            applied: Mutex::new(HashMap::new()),
            num_groups,
            leaders: Mutex::new(vec![None; num_groups as usize]),
            by_addr: Mutex::new(by_addr),
            address_map,
            tls,
        };
        c.refresh_leaders().await;
        Ok(c)
    }

    pub fn num_groups(&self) -> u32 {
        self.num_groups
    }

    fn client(&self) -> (usize, Client) {
        let i = self.current.load(Ordering::Relaxed) % self.channels.len();
        (i, CoordinatorServiceClient::new(self.channels[i].1.clone()).max_decoding_message_size(256 << 20))
    }

    /// Sends a request that is safe to repeat, moving to the next node on transport failures.
    pub async fn call<T, F, Fut>(&self, mut f: F) -> Result<T, tonic::Status>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = None;
        for _ in 0..self.channels.len() * 2 {
            let (i, c) = self.client();
            match f(c).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) if retry_elsewhere(&s) => {
                    tracing::debug!(node = %self.channels[i].0, status = %s, "coordinator unreachable, trying the next");
                    let _ = self.current.compare_exchange(i, i + 1, Ordering::Relaxed, Ordering::Relaxed);
                    last = Some(s);
                }
                Err(s) => return Err(s),
            }
        }
        Err(last.unwrap_or_else(|| tonic::Status::unavailable("no coordinator")))
    }

    /// Moves the requests that go to "any node" on to the next node (the current one answered that
    /// it cannot serve, e.g. its replica is stale). Returns how many nodes there are.
    pub fn move_on(&self) -> usize {
        let i = self.current.load(Ordering::Relaxed);
        let _ = self.current.compare_exchange(i, i + 1, Ordering::Relaxed, Ordering::Relaxed);
        self.channels.len()
    }

    /// How many coordinator nodes this broker knows.
    pub fn nodes(&self) -> usize {
        self.channels.len()
    }

    /// Sends a request once (its outcome is unknown if the transport fails).
    pub async fn call_once<T, F, Fut>(&self, f: F) -> Result<T, tonic::Status>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let (i, c) = self.client();
        let r = f(c).await;
        if let Err(s) = &r {
            if retry_elsewhere(s) {
                let _ = self.current.compare_exchange(i, i + 1, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
        r.map(|r| r.into_inner())
    }

    /// Learns every metadata partition's leader from any node.
    pub async fn refresh_leaders(&self) {
        // Every node's view at once: a node may know no leader (cut off, just restarted, or its
        // replicas not members), so per metadata partition the leader of the highest term wins.
        let views = futures_util::future::join_all(self.channels.iter().map(|(_, ch)| async move {
            let r = AdminServiceClient::new(ch.clone())
                .status(StatusRequest { with_digest: false, ..Default::default() })
                .await;
            r.ok().map(|s| s.into_inner())
        }))
        .await;
        let mut best: Vec<Option<(u64, String)>> = vec![None; self.num_groups as usize];
        let mut knowing: Option<usize> = None;
        for (i, s) in views.iter().enumerate() {
            let Some(s) = s else { continue };
            let addr: HashMap<u64, &String> = s.nodes.iter().map(|n| (n.node_id, &n.address)).collect();
            for g in &s.groups {
                let (Some(slot), Some(a)) = (best.get_mut(g.metadata_partition as usize), addr.get(&g.leader)) else {
                    continue;
                };
                if slot.as_ref().is_none_or(|(term, _)| g.term > *term) {
                    *slot = Some((g.term, self.address_map.get(*a).unwrap_or(a).clone()));
                }
            }
            if s.groups.iter().all(|g| g.leader != 0) && knowing.is_none() {
                knowing = Some(i);
            }
        }
        {
            let mut leaders = self.leaders.lock().unwrap_or_else(|e| e.into_inner());
            for (slot, b) in leaders.iter_mut().zip(best) {
                if let Some((_, addr)) = b {
                    *slot = Some(addr);
                }
            }
        }
        // Requests to "any node" go to one that knows every leader, if the current one does not.
        let cur = self.current.load(Ordering::Relaxed) % self.channels.len();
        let current_knows = views[cur].as_ref().is_some_and(|s| s.groups.iter().all(|g| g.leader != 0));
        if let (false, Some(k)) = (current_knows, knowing) {
            self.current.store(k, Ordering::Relaxed);
        }
    }

    fn channel_to(&self, addr: &str) -> Option<Channel> {
        let mut map = self.by_addr.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(addr) {
            return Some(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .ok()?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(10));
        let ch = diskless_tls::client::channel(endpoint, self.tls.clone());
        map.insert(addr.to_string(), ch.clone());
        Some(ch)
    }

    /// Commits a file, sending each metadata partition's part straight to that partition's leader
    /// (no forwarding hop), in one request per leader node carrying the parts of every partition
    /// it leads (8 partitions over 3 nodes: 3 requests, not 8). A part refused because the node is no longer the leader was not
    /// applied, so it is sent again once after learning the new leaders — unless `deadline` is
    /// (nearly) past: no part is sent after it, and a resent part carries only the time left.
    /// Per-batch results come back in request order; a part whose outcome is unknown gets
    /// REQUEST_TIMED_OUT. Empty `owner_ids` are filled in from the batches.
    pub async fn commit_file(&self, req: CommitFileRequest, deadline: Instant) -> CommitFileResponse {
        let n = self.num_groups;
        let mut parts = diskless_proto::split_by_partition(&req.batches, |b| {
            Some(
                <[u8; 16]>::try_from(b.topic_id.as_slice())
                    .map(|t| diskless_proto::metadata_partition_for(&t, b.partition_index.max(0), n))
                    .unwrap_or(0),
            )
        });
        if parts.is_empty() {
            // An empty file is recorded (garbage at once) by an owner it names.
            let owner = req.owner_ids.iter().find(|&&o| o >= 0 && (o as u32) < n);
            parts.insert(owner.map_or(0, |&o| o as u32), vec![]);
        }
        let mut req = req;
        if req.owner_ids.is_empty() {
            // Each part is sent to its group directly, so the owners must be named: all of them.
            req.owner_ids = parts.keys().map(|&g| g as i32).collect();
        }
        let mut results: Vec<Option<commit_file_response::CommitBatchResult>> = vec![None; req.batches.len()];
        let mut applied = vec![];
        let mut pending: Vec<(u32, Vec<usize>)> = parts.into_iter().collect();
        for attempt in 0..2 {
            // One request per leader node, carrying the parts of every metadata partition it leads.
            let mut by_node: std::collections::BTreeMap<Option<String>, Vec<(u32, Vec<usize>)>> = Default::default();
            {
                let leaders = self.leaders.lock().unwrap_or_else(|e| e.into_inner());
                for (g, idxs) in pending {
                    by_node.entry(leaders.get(g as usize).cloned().flatten()).or_default().push((g, idxs));
                }
            }
            let outs = futures_util::future::join_all(by_node.iter().map(|(node, parts)| {
                let sub = CommitFileRequest {
                    batches: parts.iter().flat_map(|(_, idxs)| idxs.iter().map(|&i| req.batches[i].clone())).collect(),
                    ..req.clone()
                };
                self.commit_on(node.as_deref(), sub)
            }))
            .await;
            let mut retry = vec![];
            for ((_, parts), out) in by_node.into_iter().zip(outs) {
                let total: usize = parts.iter().map(|(_, idxs)| idxs.len()).sum();
                match out {
                    Ok(resp) if resp.batches.len() == total => {
                        let mut answers = resp.batches.into_iter();
                        for (g, idxs) in parts {
                            let answers: Vec<_> = answers.by_ref().take(idxs.len()).collect();
                            // Refused by a node that does not lead the partition: nothing applied.
                            let not_leader = !idxs.is_empty() && answers.iter().all(|b| b.error_code == 6);
                            if not_leader && attempt == 0 {
                                retry.push((g, idxs));
                                continue;
                            }
                            for (&i, b) in idxs.iter().zip(answers) {
                                results[i] = Some(b);
                            }
                        }
                        applied.extend(resp.applied);
                    }
                    Ok(_) | Err(_) => {
                        for (g, idxs) in parts {
                            for &i in &idxs {
                                results[i] = Some(unknown_outcome(g));
                            }
                        }
                    }
                }
            }
            if retry.is_empty() {
                break;
            }
            self.refresh_leaders().await;
            let left = deadline.saturating_duration_since(Instant::now());
            if left < MIN_COMMIT_WINDOW {
                // Too late to send it again: it stays refused (NOT_LEADER_OR_FOLLOWER, nothing applied).
                for (g, idxs) in retry {
                    for &i in &idxs {
                        results[i] = Some(not_leader_in_time(g));
                    }
                }
                break;
            }
            req.timeout_ms = req.timeout_ms.min(left.as_millis().min(i32::MAX as u128) as i32);
            pending = retry;
        }
        let batches = results.into_iter().map(|r| r.unwrap_or_else(|| unknown_outcome(0))).collect();
        CommitFileResponse { throttle_time_ms: 0, batches, applied }
    }

    /// Sends commit parts to the node at `leader`, which serves each itself (never forwarding: a
    /// part it does not lead is refused, nothing applied), or, with no leader known, to any node,
    /// which routes each part.
    async fn commit_on(
        &self,
        leader: Option<&str>,
        sub: CommitFileRequest,
    ) -> Result<CommitFileResponse, tonic::Status> {
        // Bounded: a blackholed leader must not stall the broker's commits for minutes.
        let deadline = Duration::from_millis(sub.timeout_ms.max(1000) as u64 + 5_000);
        if let Some(ch) = leader.and_then(|a| self.channel_to(a)) {
            let mut r = tonic::Request::new(sub);
            r.metadata_mut().insert(LOCAL_HEADER, "1".parse().expect("ASCII header value"));
            r.set_timeout(deadline);
            match CoordinatorServiceClient::new(ch).commit_file(r).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) => {
                    // Delivered or not, we cannot tell: never re-sent (the caller reports an
                    // unknown outcome); learn where the leaders are now for the next commits.
                    self.refresh_leaders().await;
                    return Err(s);
                }
            }
        }
        self.call_once(|mut c| async move {
            let mut r = tonic::Request::new(sub);
            r.set_timeout(deadline);
            c.commit_file(r).await
        })
        .await
    }

    /// The topic named `name`, refreshing the catalog once when it is not known.
    pub async fn topic(&self, name: &str) -> Result<Option<TopicMeta>, tonic::Status> {
        if let Some(t) = self.topics.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
            return Ok(Some(t.clone()));
        }
        self.refresh_topics().await?;
        Ok(self.topics.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned())
    }

    /// Reloads the whole catalog.
    pub async fn refresh_topics(&self) -> Result<Vec<TopicMeta>, tonic::Status> {
        let r = self
            .call(|mut c| async move { c.list_topics(ListTopicsRequest { names: vec![], timeout_ms: 10_000 }).await })
            .await?;
        let topics: Vec<TopicMeta> = r
            .topics
            .into_iter()
            .filter_map(|t| {
                Some(TopicMeta {
                    id: t.topic_id.as_slice().try_into().ok()?,
                    name: t.name,
                    partitions: t.num_partitions,
                })
            })
            .collect();
        let mut map = self.topics.lock().unwrap_or_else(|e| e.into_inner());
        map.clear();
        for t in &topics {
            map.insert(t.name.clone(), t.clone());
        }
        Ok(topics)
    }

    /// Forgets a topic (after deleting it, or when the coordinator says it is unknown).
    pub fn forget_topic(&self, name: &str) {
        self.topics.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    }

    /// Remembers the indexes a commit was applied at.
    pub fn record_applied(&self, applied: &[GroupIndex]) {
        let mut map = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        for g in applied {
            let e = map.entry(g.metadata_partition).or_insert(0);
            *e = (*e).max(g.index);
        }
    }

    /// The indexes a replica must have applied to show this broker's own commits.
    pub fn min_applied(&self) -> Vec<GroupIndex> {
        let map = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(&metadata_partition, &index)| GroupIndex { metadata_partition, index }).collect()
    }
}

impl Coordinators {
    /// ListOffsets of one partition: `(timestamp, offset)`.
    pub async fn list_offset(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        timestamp: i64,
    ) -> Result<(i64, i64), crate::error::KafkaError> {
        use crate::error::KafkaError;
        let req = ListOffsetsRequest {
            topics: vec![list_offsets_request::ListOffsetsTopic {
                topic_id: topic_id.to_vec(),
                partitions: vec![list_offsets_request::ListOffsetsPartition { partition_index: partition, timestamp }],
            }],
            timeout_ms: 10_000,
        };
        let mut attempts = 0;
        // Strict reads are served by the metadata partition's leader: ask it directly (no
        // forwarding hop). Any node still routes the read when the leader is unknown or moved.
        let g = diskless_proto::metadata_partition_for(&topic_id, partition.max(0), self.num_groups);
        let leader = self.leaders.lock().unwrap_or_else(|e| e.into_inner()).get(g as usize).cloned().flatten();
        if let Some(ch) = leader.as_deref().and_then(|a| self.channel_to(a)) {
            let r = CoordinatorServiceClient::new(ch).list_offsets(req.clone()).await;
            match r.map(|r| r.into_inner().topics.into_iter().flat_map(|t| t.partitions).next()) {
                Ok(Some(p)) if p.error_code != diskless_proto::ErrorCode::NotLeaderOrFollower.wire() => {
                    return KafkaError::from_wire(p.error_code, p.error_message)
                        .map_or(Ok((p.timestamp, p.offset)), Err);
                }
                // Gone, or no longer the leader: learn the leaders again, ask any node meanwhile.
                _ => self.refresh_leaders().await,
            }
        }
        loop {
            let resp = self
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.list_offsets(req).await }
                })
                .await
                .map_err(|s| KafkaError::unavailable("list offsets", &s))?;
            let p = resp.topics.into_iter().flat_map(|t| t.partitions).next().ok_or_else(no_answer)?;
            attempts += 1;
            // A node that knows no leader for the partition cannot route the read: ask another.
            if p.error_code == diskless_proto::ErrorCode::NotLeaderOrFollower.wire() && attempts < self.nodes() {
                self.move_on();
                continue;
            }
            return KafkaError::from_wire(p.error_code, p.error_message).map_or(Ok((p.timestamp, p.offset)), Err);
        }
    }

    /// DeleteRecords of one partition: the new low watermark. Sent once (not repeated on failure).
    pub async fn delete_records_before(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        offset: i64,
        timeout_ms: i32,
    ) -> Result<i64, crate::error::KafkaError> {
        use crate::error::KafkaError;
        let req = DeleteRecordsRequest {
            topics: vec![delete_records_request::DeleteRecordsTopic {
                topic_id: topic_id.to_vec(),
                partitions: vec![delete_records_request::DeleteRecordsPartition { partition_index: partition, offset }],
            }],
            timeout_ms: timeout_ms.max(1000),
        };
        let resp = self
            .call_once(|mut c| async move { c.delete_records(req).await })
            .await
            .map_err(|s| KafkaError::unavailable("delete records", &s))?;
        let p = resp.topics.into_iter().flat_map(|t| t.partitions).next().ok_or_else(no_answer)?;
        KafkaError::from_wire(p.error_code, p.error_message).map_or(Ok(p.low_watermark), Err)
    }
}

/// Less time than this left before a commit's deadline: the commit is not sent.
pub const MIN_COMMIT_WINDOW: Duration = Duration::from_millis(100);

/// What the coordinator cluster knows of an object once its key is fenced (FenceObjects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// Some metadata partition still has live batches in it: it must not be deleted.
    Live,
    /// Released, at the latest at `at` (milliseconds since the epoch); unknown to (and now fenced
    /// in) the other metadata partitions named.
    Released { at: i64 },
    /// Known to none of the metadata partitions named; each refuses a commit of it from now on.
    Fenced,
    /// A metadata partition named did not answer: nothing is known, delete nothing.
    Unknown(String),
}

impl Coordinators {
    /// Fences objects, each in the metadata partitions given (empty: every one), and says what
    /// they know of it. Safe to repeat.
    pub async fn fence_objects(&self, objects: &[(String, Vec<u32>)]) -> Result<Vec<Fence>, tonic::Status> {
        let req = FenceObjectsRequest {
            objects: objects
                .iter()
                .map(|(k, groups)| fence_objects_request::FenceObjectEntry {
                    object_key: k.clone(),
                    metadata_partitions: groups.clone(),
                })
                .collect(),
            timeout_ms: 10_000,
        };
        let r = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.fence_objects(req).await }
            })
            .await?;
        if r.objects.len() != objects.len() {
            return Err(tonic::Status::internal(format!(
                "FenceObjects answered {} of {} objects",
                r.objects.len(),
                objects.len()
            )));
        }
        Ok(r.objects
            .into_iter()
            .map(|o| {
                if o.error_code != 0 {
                    return Fence::Unknown(format!("error {}: {}", o.error_code, o.error_message.unwrap_or_default()));
                }
                match o.state() {
                    ObjectState::Live => Fence::Live,
                    ObjectState::Released => Fence::Released { at: o.released_at },
                    ObjectState::Fenced => Fence::Fenced,
                    ObjectState::Unspecified => Fence::Unknown("no state in the answer".into()),
                }
            })
            .collect())
    }
}

/// A batch whose part was refused by a node that was not the leader and not sent again in time.
fn not_leader_in_time(g: u32) -> commit_file_response::CommitBatchResult {
    commit_file_response::CommitBatchResult {
        error_code: diskless_proto::ErrorCode::NotLeaderOrFollower.wire(),
        error_message: Some(format!(
            "metadata partition {g}'s leader moved and the commit's deadline left no time to send it again"
        )),
        assigned_base_offset: -1,
        log_append_time: -1,
        log_start_offset: -1,
        is_duplicate: false,
    }
}

/// A batch whose commit may or may not have happened.
fn unknown_outcome(g: u32) -> commit_file_response::CommitBatchResult {
    commit_file_response::CommitBatchResult {
        error_code: diskless_proto::ErrorCode::RequestTimedOut.wire(),
        error_message: Some(format!("metadata partition {g} did not confirm the commit; its outcome is unknown")),
        assigned_base_offset: -1,
        log_append_time: -1,
        log_start_offset: -1,
        is_duplicate: false,
    }
}

fn no_answer() -> crate::error::KafkaError {
    crate::error::KafkaError::new(
        diskless_proto::ErrorCode::UnknownServerError,
        "the coordinator answered no partition",
    )
}

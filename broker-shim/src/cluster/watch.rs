//! The broker's watch of every metadata partition's changes (WatchPartitions), feeding
//! [`Marks`](super::marks::Marks) and the batch-coordinate cache (`coordinates`: the batches each
//! change appended, asked for with `with_batches`): one stream per metadata partition, spread over the nodes (any
//! replica serves it), resumed after the last index it accounted for when the stream breaks, the
//! node stops answering (no heartbeat for [`SILENCE`]) or refuses; on the next node after a failure.
//! A reset from the node, or a stream that could not be resumed, wakes the metadata partition's
//! parked fetches (they read again). Must not decide anything about fetches.

use std::sync::Arc;
use std::time::Duration;

use diskless_proto::v1::coordinator_service_client::CoordinatorServiceClient;
use diskless_proto::v1::WatchPartitionsRequest;

use super::coordinates::Coordinate;
use super::marks::Marks;
use super::ClusterClient;

/// A stream silent this long (the node sends a heartbeat every second) is given up.
const SILENCE: Duration = Duration::from_secs(3);
/// Pause before asking the next node, doubling up to a second.
const BACKOFF: Duration = Duration::from_millis(100);

impl ClusterClient {
    /// Watches every metadata partition until `stop` fires.
    pub fn start_watches(self: &Arc<Self>, stop: tokio::sync::watch::Receiver<bool>) {
        for g in 0..self.num_metadata_partitions {
            let me = self.clone();
            let stop = stop.clone();
            tokio::spawn(async move { me.watch_partition(g, stop).await });
        }
    }

    /// The marks the watches and this broker's own commits keep.
    pub fn marks(&self) -> &Arc<Marks> {
        &self.marks
    }

    async fn watch_partition(&self, g: u32, mut stop: tokio::sync::watch::Receiver<bool>) {
        let m = crate::metrics::get();
        // 0: from the node's applied index now (nothing to resume yet).
        let mut cursor = 0u64;
        // Spread the streams: metadata partition g starts on node g.
        let mut node = g as usize;
        let mut backoff = BACKOFF;
        loop {
            if *stop.borrow() {
                return;
            }
            let (addr, ch) = &self.channels[node % self.channels.len()];
            let client = CoordinatorServiceClient::new(ch.clone()).max_decoding_message_size(64 << 20);
            let before = cursor;
            let ended = tokio::select! {
                r = self.follow(client, g, &mut cursor) => r,
                _ = stop.wait_for(|&s| s) => return,
            };
            if cursor != before {
                // The stream made progress: the next failure starts the backoff over.
                backoff = BACKOFF;
            }
            self.marks.set_live(g, false);
            m.watch_reconnects.inc();
            tracing::debug!(metadata_partition = g, node = %addr, cursor, reason = %ended, "watch lost; resuming on the next node");
            node += 1;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Drops the cached coordinates of metadata partition `g`'s partitions: its changes (a replace
    /// among them) may have been missed.
    fn forget_coordinates(&self, g: u32) {
        let n = self.num_metadata_partitions();
        self.coordinates
            .forget(|topic_id, partition| diskless_proto::metadata_partition_for(topic_id, partition, n) == g);
    }

    /// Follows one stream until it ends; returns why.
    async fn follow(
        &self,
        mut client: CoordinatorServiceClient<tonic::transport::Channel>,
        g: u32,
        cursor: &mut u64,
    ) -> &'static str {
        let m = crate::metrics::get();
        let resumed = *cursor > 0;
        let req_after = *cursor;
        let req = WatchPartitionsRequest {
            metadata_partition: g,
            after_index: req_after,
            with_batches: self.coordinates.enabled(),
        };
        let mut stream = match tokio::time::timeout(SILENCE, client.watch_partitions(req)).await {
            Ok(Ok(s)) => s.into_inner(),
            Ok(Err(_)) => return "refused",
            Err(_) => return "no answer",
        };
        let mut first = true;
        loop {
            let msg = match tokio::time::timeout(SILENCE, stream.message()).await {
                Ok(Ok(Some(msg))) => msg,
                Ok(Ok(None)) => return "ended",
                Ok(Err(_)) => return "failed",
                Err(_) => return "no message",
            };
            if msg.reset {
                m.watch_resets.inc();
                self.marks.reset(g, msg.index);
                self.forget_coordinates(g);
                self.marks.stream_started(g, msg.index);
            }
            if msg.log_starts_moved {
                self.marks.distrust(g);
            }
            // The batches before the marks move: a fetch they wake finds its batches cached.
            for a in &msg.appended {
                let key: Arc<str> = Arc::from(a.object_key.as_str());
                for b in &a.batches {
                    let Ok(topic_id) = <[u8; 16]>::try_from(b.topic_id.as_slice()) else { continue };
                    if b.is_transactional || b.marker.is_some() {
                        self.marks.observe_transactional(topic_id, b.partition_index, a.index);
                    }
                    let c = Coordinate::from_appended(b, key.clone());
                    self.coordinates.insert(topic_id, b.partition_index, c, a.index);
                }
            }
            // Batches a replace moved: their entries follow them.
            for mv in &msg.moved {
                let Ok(topic_id) = <[u8; 16]>::try_from(mv.topic_id.as_slice()) else { continue };
                let key: Arc<str> = Arc::from(mv.object_key.as_str());
                let moves: Vec<(i64, i64)> =
                    mv.last_offsets.iter().copied().zip(mv.byte_offsets.iter().copied()).collect();
                self.coordinates.moved(topic_id, mv.partition_index, mv.index, &key, &moves);
            }
            for c in &msg.changes {
                let Ok(topic_id) = <[u8; 16]>::try_from(c.topic_id.as_slice()) else { continue };
                if c.deleted {
                    self.coordinates.topic_deleted(topic_id);
                    self.marks.topic_deleted(topic_id, c.index);
                } else {
                    let hwm = (c.high_watermark >= 0).then_some(c.high_watermark);
                    let log_start = (c.log_start_offset >= 0).then_some(c.log_start_offset);
                    if let Some(l) = log_start {
                        self.coordinates.truncate_below(topic_id, c.partition_index, l);
                    }
                    self.marks.observe(topic_id, c.partition_index, hwm, log_start, c.index);
                }
            }
            if msg.index > *cursor || msg.reset {
                *cursor = msg.index;
            }
            if first {
                first = false;
                if !resumed && !msg.reset {
                    // A fresh stream (none before, or one that had not got a message): changes
                    // before it were not watched.
                    self.marks.reset(g, msg.index);
                    self.forget_coordinates(g);
                }
                if !msg.reset {
                    // Every change after the cursor asked from (or, fresh, this first index).
                    self.marks.stream_started(g, if resumed { req_after } else { msg.index });
                }
                self.marks.set_live(g, true);
            }
        }
    }
}

//! FenceObjects: before an object is deleted, its key is fenced in the metadata partitions that
//! may hold it, and each says what it knows (live, released, never known); a key fenced in a
//! metadata partition is refused by every later commit there. Safe to repeat. It must not delete
//! anything: the cleaner and the produce path decide from the answer.

use diskless_proto::v1::*;

use super::ClusterClient;

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

impl ClusterClient {
    /// Fences objects, each in the metadata partitions given (empty: every one), and says what
    /// they know of it. Safe to repeat.
    pub async fn fence_objects(&self, objects: &[(String, Vec<u32>)]) -> Result<Vec<Fence>, tonic::Status> {
        let req = FenceObjectsRequest {
            objects: objects
                .iter()
                .map(|(k, metadata_partitions)| fence_objects_request::FenceObjectEntry {
                    object_key: k.clone(),
                    metadata_partitions: metadata_partitions.clone(),
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

//! Several data directories per node (KIP-113): replicas spread over them, DescribeDirs, moving a
//! replica between directories online (under commits and follower reads; throttled; cancelled),
//! kill -9 in every phase of a move, and bad requests.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskless_cluster_tests::*;
use diskless_proto::admin::admin_service_client::AdminServiceClient;
use diskless_proto::admin::*;

fn options(metadata_partitions: u32, extra: &str) -> Options {
    Options {
        metadata_partitions,
        data_dirs: 2,
        extra_config: extra.to_string(),
        leader_balance_ms: 0,
        ..Options::default()
    }
}

async fn describe(c: &Cluster, id: u64) -> DescribeDirsResponse {
    c.admin(id).await.describe_dirs(DescribeDirsRequest {}).await.expect("describe dirs").into_inner()
}

/// The directories (paths) holding `g` as a current replica on node `id`, and whether a future
/// replica of it exists.
async fn where_is(c: &Cluster, id: u64, g: u32) -> (Vec<String>, bool) {
    let r = describe(c, id).await;
    let mut current = vec![];
    let mut future = false;
    for d in &r.dirs {
        for rep in d.replicas.iter().filter(|x| x.metadata_partition == g) {
            if rep.is_future {
                future = true;
            } else {
                current.push(d.path.clone());
            }
        }
    }
    (current, future)
}

fn other_dir(c: &Cluster, id: u64, current: &str) -> String {
    c.data_dirs(id).iter().map(|d| d.display().to_string()).find(|d| d != current).expect("a second directory")
}

async fn commit_n(c: &Cluster, via: u64, prefix: &str, n: usize) {
    let mut client = c.client(via).await;
    for i in 0..n {
        commit_all(&mut client, &format!("{prefix}/{i}"), &topic_id(1), &[(0, 2), (1, 3), (2, 1), (3, 4)]).await;
    }
}

fn assert_same_state(digests: &[std::collections::BTreeMap<u64, String>], nodes: usize) {
    for (g, per_node) in digests.iter().enumerate() {
        assert_eq!(per_node.len(), nodes, "metadata partition {g}: every node answered");
        let distinct: BTreeSet<&String> = per_node.values().collect();
        assert_eq!(distinct.len(), 1, "metadata partition {g}: replicas differ: {per_node:?}");
    }
}

/// Waits until node `id`'s move of `g` is done (no future replica, current in `dir`).
async fn wait_moved(c: &Cluster, id: u64, g: u32, dir: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let (current, future) = where_is(c, id, g).await;
        if !future && current == vec![dir.to_string()] {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {id} metadata partition {g}: not moved to {dir}: {current:?} future={future}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_spread_over_directories_and_bad_moves_are_refused() {
    let mut c = Cluster::start(3, options(4, "intra_dir_throttled_rate = 1")).await;
    create_topic(&mut c.client(1).await, &topic_id(1), "t", 4).await;
    commit_n(&c, 1, "a", 5).await;

    // Four metadata partitions over two directories: two each (equal free space, then fewest
    // replicas).
    let r = describe(&c, 2).await;
    assert_eq!(r.node_id, 2);
    assert_eq!(r.dirs.len(), 2);
    for d in &r.dirs {
        assert_eq!(d.error_code, 0, "{d:?}");
        assert!(d.total_bytes > 0 && d.total_bytes >= d.usable_bytes, "{d:?}");
        assert_eq!(d.replicas.len(), 2, "{d:?}");
        assert!(d.replicas.iter().all(|x| !x.is_future && x.size_bytes > 0), "{d:?}");
        uuid::Uuid::parse_str(&d.dir_id).expect("a directory id is a UUID");
    }
    // The CLI's JSON has the same.
    let out = coordctl(c.addr(2)).args(["--json", "dirs", "describe"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["dirs"].as_array().unwrap().len(), 2);

    let (here, _) = where_is(&c, 2, 0).await;
    let there = other_dir(&c, 2, &here[0]);
    let mut admin = c.admin(2).await;
    let alter = |g: u32, dir: &str, cancel: bool| AlterReplicaDirRequest {
        metadata_partition: g,
        dir: dir.to_string(),
        cancel,
    };
    let e = admin.alter_replica_dir(alter(0, "/no/such/dir", false)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("no data directory /no/such/dir"), "{}", e.message());
    let e = admin.alter_replica_dir(alter(0, &here[0], false)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists, "{e:?}");
    let e = admin.alter_replica_dir(alter(9, &there, false)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let e = admin.alter_replica_dir(alter(0, "", true)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "cancel without a move: {e:?}");
    // A move throttled to 1 byte/s stays in its copy: a second move of the metadata partition is
    // refused, then it is cancelled and nothing changed.
    admin.alter_replica_dir(alter(0, &there, false)).await.unwrap();
    let e = admin.alter_replica_dir(alter(0, &there, false)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("already moving"), "{}", e.message());
    let (_, future) = where_is(&c, 2, 0).await;
    assert!(future, "the future replica is listed while the move runs");
    let out = coordctl(c.addr(1)).args(["dirs", "move", "--node", "2", "--group", "0", "--cancel"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (current, future) = where_is(&c, 2, 0).await;
        if !future {
            assert_eq!(current, here, "a cancelled move leaves the replica where it was");
            break;
        }
        assert!(Instant::now() < deadline, "the cancelled move's future replica is still there");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The throttle changes at run time.
    let out = coordctl(c.addr(2)).args(["--json", "dirs", "throttle", "--rate", "0"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(describe(&c, 2).await.throttled_rate, 0);

    // A directory of another node is refused at start, with a message saying whose it is.
    c.kill(3);
    let mine = c.data_dirs(3)[1].clone();
    std::fs::remove_dir_all(&mine).unwrap();
    let status = std::process::Command::new("cp").arg("-a").arg(&c.data_dirs(2)[1]).arg(&mine).status().unwrap();
    assert!(status.success());
    c.spawn(3);
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.exited(3).is_none() {
        assert!(Instant::now() < deadline, "node 3 started with another node's directory");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(c.root().join("node-3.log")).unwrap();
    assert!(log.contains("belongs to node 2"), "node 3's log explains the refusal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_moves_between_directories_under_commits_and_follower_reads() {
    let c = Arc::new(Cluster::start(3, options(2, "")).await);
    create_topic(&mut c.client(1).await, &topic_id(1), "t", 4).await;
    // Some state to copy.
    commit_n(&c, 1, "seed", 300).await;

    // Writers commit through node 1 all along; node 2 serves follower reads all along.
    let stop = Arc::new(AtomicBool::new(false));
    let moving = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let writer = {
        let (c, stop, moving, acked) = (c.clone(), stop.clone(), moving.clone(), acked.clone());
        tokio::spawn(async move {
            let mut client = c.client(1).await;
            let (mut idle, mut during) = (vec![], vec![]);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let during_move = moving.load(Ordering::Relaxed);
                commit_all(&mut client, &format!("w/{i}"), &topic_id(1), &[(0, 1), (1, 1), (2, 1), (3, 1)]).await;
                let us = t.elapsed().as_micros() as u64;
                if during_move {
                    during.push(us);
                } else {
                    idle.push(us);
                }
                acked.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            (idle, during)
        })
    };
    let reader = {
        let (c, stop) = (c.clone(), stop.clone());
        tokio::spawn(async move {
            let mut client = c.client(2).await;
            let (mut ok, mut failed) = (0u64, vec![]);
            while !stop.load(Ordering::Relaxed) {
                match all_batches(&mut client, &topic_id(1), 0, vec![]).await {
                    Ok(_) => ok += 1,
                    Err(e) => failed.push(e),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (ok, failed)
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Move both metadata partitions on node 2 (the follower readers use) and metadata partition 0
    // on node 1 (the leader of metadata partition 0 or not), through the CLI; the second node-2
    // move throttled.
    let mut figures = vec![];
    for (node, g, rate) in [(2u64, 0u32, 0u64), (1, 0, 0), (2, 1, 256 << 10)] {
        let out = coordctl(c.addr(node)).args(["dirs", "throttle", "--rate", &rate.to_string()]).output().unwrap();
        assert!(out.status.success());
        let (here, _) = where_is(&c, node, g).await;
        let size = describe(&c, node)
            .await
            .dirs
            .iter()
            .flat_map(|d| d.replicas.clone())
            .find(|r| r.metadata_partition == g && !r.is_future)
            .unwrap()
            .size_bytes;
        let there = other_dir(&c, node, &here[0]);
        moving.store(true, Ordering::Relaxed);
        let t = Instant::now();
        let out = coordctl(c.addr(node))
            .args(["--json", "dirs", "move", "--group", &g.to_string(), "--to", &there])
            .output()
            .unwrap();
        let secs = t.elapsed().as_secs_f64();
        moving.store(false, Ordering::Relaxed);
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["dir"], there.as_str());
        wait_moved(&c, node, g, &there, Duration::from_secs(10)).await;
        figures.push(format!(
            "node {node} metadata partition {g}: {:.2} MiB in {secs:.2} s = {:.2} MiB/s (throttle {rate} B/s); {}",
            size as f64 / (1 << 20) as f64,
            size as f64 / (1 << 20) as f64 / secs,
            v["outcome"]
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut idle, mut during) = writer.await.unwrap();
    let (reads_ok, read_errors) = reader.await.unwrap();
    for f in &figures {
        eprintln!("move: {f}");
    }
    idle.sort();
    during.sort();
    eprintln!(
        "commit latency without a move: n={} p50={} us p99={} us; during moves: n={} p50={} us p99={} us",
        idle.len(),
        percentile(&idle, 0.5),
        percentile(&idle, 0.99),
        during.len(),
        percentile(&during, 0.5),
        percentile(&during, 0.99)
    );
    eprintln!("follower reads on node 2: {reads_ok} answered, errors: {read_errors:?}");
    assert!(reads_ok > 0);
    // Only retriable errors (a replica briefly unable to serve), never a wrong answer.
    for e in &read_errors {
        assert!(e.starts_with("FindBatches error 9:"), "a read error that is not retriable: {e}");
    }

    // Every acknowledged commit is there, on every node, and the replicas agree.
    assert_same_state(&c.converged_digests(Duration::from_secs(60)).await, 3);
    let n = acked.load(Ordering::Relaxed) as usize;
    for id in [1, 2, 3] {
        let batches = all_batches(&mut c.client(id).await, &topic_id(1), 3, vec![]).await.unwrap();
        assert_eq!(batches.len(), 300 + n, "node {id} has every acknowledged batch of partition 3");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_in_any_phase_of_a_move_leaves_exactly_one_current_replica() {
    let mut c = Cluster::start(3, options(2, "test_replica_move_pause_ms = 4000")).await;
    create_topic(&mut c.client(1).await, &topic_id(1), "t", 4).await;
    commit_n(&c, 1, "seed", 50).await;
    for (round, phase) in ["copying", "catching_up", "switching", "deleting"].into_iter().enumerate() {
        let (here, _) = where_is(&c, 2, 0).await;
        let there = other_dir(&c, 2, &here[0]);
        c.admin(2)
            .await
            .alter_replica_dir(AlterReplicaDirRequest { metadata_partition: 0, dir: there.clone(), cancel: false })
            .await
            .unwrap();
        // Wait until the move is in the phase, then kill -9 the node there.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = describe(&c, 2).await;
            if r.dirs.iter().flat_map(|d| &d.replicas).any(|x| x.metadata_partition == 0 && x.move_phase == phase) {
                break;
            }
            assert!(Instant::now() < deadline, "the move never reached {phase}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        c.kill(2);
        commit_n(&c, 1, &format!("k{round}"), 5).await;
        c.spawn(2);
        c.wait_for_leaders(Duration::from_secs(60)).await;
        let (current, future) = where_is(&c, 2, 0).await;
        eprintln!("killed while {phase}: metadata partition 0 now in {current:?}");
        assert_eq!(current.len(), 1, "killed while {phase}: exactly one current replica: {current:?}");
        assert!(!future, "killed while {phase}: no future replica after the restart");
        // Before the switch the old copy stays; once switched the new one does. A kill while
        // switching lands before or after the switch's synced write: either is whole.
        match phase {
            "copying" | "catching_up" => assert_eq!(current, here, "{phase}"),
            "switching" => assert!(current == here || current == vec![there.clone()], "{phase}"),
            _ => assert_eq!(current, vec![there.clone()], "{phase}"),
        }
        assert_same_state(&c.converged_digests(Duration::from_secs(60)).await, 3);
    }
    let batches = all_batches(&mut c.client(2).await, &topic_id(1), 0, vec![]).await.unwrap();
    assert_eq!(batches.len(), 50 + 4 * 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_directory_stops_only_its_replicas_and_they_come_back_through_membership() {
    let mut c = Cluster::start(3, options(2, "")).await;
    let topic = topic_id(1);
    create_topic(&mut c.client(1).await, &topic, "t", 8).await;
    let topic16: [u8; 16] = topic.clone().try_into().unwrap();
    let owned_by = |g: u32| (0..8).find(|&p| diskless_proto::metadata_partition_for(&topic16, p, 2) == g).unwrap();
    let (p0, p1) = (owned_by(0), owned_by(1));
    let commit = |prefix: &'static str| {
        let c = &c;
        let topic = topic.clone();
        async move {
            let mut client = c.client(1).await;
            for i in 0..10 {
                commit_all(&mut client, &format!("{prefix}/{i}"), &topic, &[(p0, 1), (p1, 1)]).await;
            }
        }
    };
    commit("a").await;
    // On node 2: one metadata partition per directory. Fail the directory of metadata partition 0.
    let (dir0, _) = where_is(&c, 2, 0).await;
    let (dir1, _) = where_is(&c, 2, 1).await;
    assert_ne!(dir0, dir1, "the two metadata partitions are in different directories");
    c.admin(2)
        .await
        .inject_fault(FaultRequest { fail_dir: Some(dir0[0].clone()), ..Default::default() })
        .await
        .unwrap();

    // The cluster keeps committing (nodes 1 and 3 are a quorum of metadata partition 0) ...
    commit("b").await;
    // ... node 2 reports the directory offline, in DescribeDirs and Status ...
    let r = describe(&c, 2).await;
    let failed = r.dirs.iter().find(|d| d.path == dir0[0]).unwrap();
    assert_eq!(failed.error_code, 56, "KAFKA_STORAGE_ERROR: {failed:?}");
    assert!(r.dirs.iter().any(|d| d.path == dir1[0] && d.error_code == 0));
    let s = c.status(2, false).await;
    assert!(s.groups[0].dir_offline && !s.groups[1].dir_offline, "{:?}", s.groups);
    let out = coordctl(c.addr(2)).args(["dirs", "describe"]).output().unwrap();
    assert!(!out.status.success(), "describe exits 1 with a directory offline");
    // ... and serves the metadata partition of its other directory, but not the failed one.
    let mut client2 = c.client(2).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match all_batches(&mut client2, &topic, p1, vec![]).await {
            Ok(b) if b.len() == 20 => break,
            other => assert!(Instant::now() < deadline, "node 2 does not serve metadata partition 1: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let e = all_batches(&mut client2, &topic, p0, vec![]).await.unwrap_err();
    assert!(e.starts_with("FindBatches error 9:"), "{e}");
    assert!(c.exited(2).is_none(), "node 2 still runs");

    // Recovery: the disk is replaced (an empty directory) and the node restarted: metadata
    // partition 0 gets a new replica (new incarnation) that takes no part until it is added back
    // through membership: removed, added as a learner that catches up from the others, then
    // promoted.
    c.kill(2);
    std::fs::remove_dir_all(&dir0[0]).unwrap();
    c.spawn(2);
    // (Its new replica of metadata partition 0 knows no leader: it is not a member.)
    let deadline = Instant::now() + Duration::from_secs(60);
    let s = loop {
        if let Ok(ch) =
            tonic::transport::Endpoint::from_shared(format!("http://{}", c.addr(2))).unwrap().connect().await
        {
            if let Ok(s) = AdminServiceClient::new(ch).status(StatusRequest::default()).await {
                let s = s.into_inner();
                if s.groups[1].leader != 0 {
                    break s;
                }
            }
        }
        assert!(Instant::now() < deadline, "node 2 did not come back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!s.groups[0].member && s.groups[1].member, "{:?}", s.groups);
    assert_eq!(s.groups[0].last_log_index, 0, "the new replica took part before it was added: {:?}", s.groups[0]);
    let out = coordctl(c.addr(1)).args(["dirs", "recover", "--node", "2"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(c.status(2, false).await.groups.iter().all(|g| g.member));
    assert_same_state(&c.converged_digests(Duration::from_secs(60)).await, 3);
    let batches = all_batches(&mut c.client(2).await, &topic, p0, vec![]).await.unwrap();
    assert_eq!(batches.len(), 20, "node 2 serves metadata partition 0 again, with everything");
}

/// Figures for the notes, not a pass/fail test: `DISKLESS_DIRS_FIGURE_FILES` files of 64 batches
/// each fill one metadata partition, then node 2 moves it unthrottled and throttled while a
/// committer measures commit latency. Run with `--ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn move_figures() {
    let files: usize = std::env::var("DISKLESS_DIRS_FIGURE_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let c = Arc::new(Cluster::start(3, options(1, "")).await);
    create_topic(&mut c.client(1).await, &topic_id(1), "t", 64).await;
    let parts: Vec<(i32, i64)> = (0..64).map(|p| (p, 1)).collect();
    let filled = Instant::now();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (c, parts) = (c.clone(), parts.clone());
            tokio::spawn(async move {
                let mut client = c.client(1).await;
                for i in (w..files).step_by(8) {
                    commit_all(&mut client, &format!("fill/{i}"), &topic_id(1), &parts).await;
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    eprintln!("filled {files} files of 64 batches in {:.1} s", filled.elapsed().as_secs_f64());
    let stop = Arc::new(AtomicBool::new(false));
    let phase = Arc::new(AtomicU64::new(0));
    let committer = {
        let (c, stop, phase) = (c.clone(), stop.clone(), phase.clone());
        tokio::spawn(async move {
            let mut client = c.client(1).await;
            let mut by_phase: Vec<Vec<u64>> = vec![vec![]; 4];
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let p = phase.load(Ordering::Relaxed) as usize;
                let t = Instant::now();
                commit_all(&mut client, &format!("lat/{i}"), &topic_id(1), &[(0, 1)]).await;
                by_phase[p].push(t.elapsed().as_micros() as u64);
                i += 1;
            }
            by_phase
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (k, rate) in [(1u64, 0u64), (2, 4 << 20)] {
        coordctl(c.addr(2)).args(["dirs", "throttle", "--rate", &rate.to_string()]).output().unwrap();
        let (here, _) = where_is(&c, 2, 0).await;
        let r = describe(&c, 2).await;
        let size = r.dirs.iter().flat_map(|d| d.replicas.clone()).find(|x| !x.is_future).unwrap().size_bytes;
        let there = other_dir(&c, 2, &here[0]);
        phase.store(k, Ordering::Relaxed);
        let t = Instant::now();
        let out =
            coordctl(c.addr(2)).args(["--json", "dirs", "move", "--group", "0", "--to", &there]).output().unwrap();
        let secs = t.elapsed().as_secs_f64();
        phase.store(3, Ordering::Relaxed);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mib = size as f64 / (1 << 20) as f64;
        eprintln!(
            "FIGURE move throttle={rate} B/s: {mib:.1} MiB in {secs:.2} s = {:.1} MiB/s; {}",
            mib / secs,
            v["outcome"]
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut by_phase = committer.await.unwrap();
    for (k, name) in [(0, "before any move"), (1, "unthrottled move"), (2, "throttled move"), (3, "between/after")] {
        let v = &mut by_phase[k];
        v.sort();
        eprintln!(
            "FIGURE commit latency {name}: n={} p50={:.1} ms p99={:.1} ms",
            v.len(),
            percentile(v, 0.5) as f64 / 1000.0,
            percentile(v, 0.99) as f64 / 1000.0
        );
    }
    assert_same_state(&c.converged_digests(Duration::from_secs(120)).await, 3);
}

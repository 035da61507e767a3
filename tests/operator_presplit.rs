//! Issue 36: the pre-split before an incremental repair, created the way docs/repair.md's flow
//! creates it, on the real apiserver (`scripts/k8s-testenv.sh`) against a real two-node
//! Cassandra 5.0.9 cluster on loopback (A 127.0.0.1 token 0, B 127.0.0.2 token 2^62, RF 2):
//!
//! - an AnticompactionJob `mode: PreSplit, publish: OnRestart` for A, its tokens read by the
//!   sidecar from A's ring (Cassandra's own `nodetool describering`, served by the management
//!   API stand-in on the OpenAPI document's `/api/v2/tokens/rangetoendpoint`), waits in
//!   `AwaitingRestart`; A stops, `cleave apply-pending` (the init container) publishes, A
//!   starts, the job completes;
//! - the rows of A are unchanged (Cassandra's own reader over A's sstables, every row hashed,
//!   and a SELECT of every row through A);
//! - then a real incremental repair (`nodetool repair -pr` on A, then on B) re-marks A's
//!   pre-split sstables without rewriting a byte (Cassandra's TableMetrics
//!   `BytesAnticompacted` 0, `BytesMutatedAnticompaction` > 0), while the same repair of the
//!   same rows in a table that was not pre-split anticompacts on A (the negative control:
//!   `BytesAnticompacted` > 0), and the rows stay unchanged.

#![cfg(test)]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::cassandra::{installed, node_lock, require, Node};
use common::k8s::{control_plane_or_skip, Cluster, Sidecar};
use common::mgmt::StandIn;
use common::oracle_java::{oracle_or_skip, Summary};
use common::xfs_or_skip;

const V: &str = "5.0.9";
const TOKEN_B: &str = "4611686018427387904";
const TABLES: [&str; 2] = ["presplit", "plain"];

/// The ring of `nodetool describering KS` as the stand-in serves it (`--ring`): the ranges
/// with their replicas as Cassandra prints them, and the two endpoints, A local.
fn ring_json(describering: &str) -> String {
    let mut ranges = Vec::new();
    for line in describering.lines() {
        let Some(rest) = line.trim().strip_prefix("TokenRange(start_token:") else {
            continue;
        };
        let (start, rest) = rest.split_once(", end_token:").unwrap();
        let (end, rest) = rest.split_once(", endpoints:[").unwrap();
        let (eps, _) = rest.split_once(']').unwrap();
        let endpoints: Vec<&str> = eps.split(',').map(str::trim).collect();
        ranges.push(serde_json::json!({
            "tokens": [start.parse::<i64>().unwrap(), end.parse::<i64>().unwrap()],
            "endpoints": endpoints,
        }));
    }
    assert_eq!(
        ranges.len(),
        2,
        "two nodes, one token each:\n{describering}"
    );
    serde_json::json!({
        "endpoints": [
            {"ENDPOINT_IP": "127.0.0.1", "STATUS": "NORMAL,0", "IS_LOCAL": "true", "DC": "datacenter1"},
            {"ENDPOINT_IP": "127.0.0.2", "STATUS": format!("NORMAL,{TOKEN_B}"), "IS_LOCAL": "false", "DC": "datacenter1"},
        ],
        "ranges": ranges,
        "keyspaces": ["oracle"],
    })
    .to_string()
}

fn data_files(node: &Node, table: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(node.table_dir("oracle", table))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-Data.db"))
        .collect();
    v.sort();
    v
}

/// What a row digest says about the rows: their number, hashes and token span, not the
/// count of empty partitions (a child's filler is one).
fn same_rows(s: Summary) -> (u64, u64, u64, i64, i64) {
    (s.count, s.sum, s.xor, s.min, s.max)
}

/// A TableMetrics counter of `oracle.TABLE` on the node (`nodetool sjk mx`).
fn metric(node: &Node, table: &str, name: &str) -> u64 {
    let bean = format!(
        "org.apache.cassandra.metrics:type=Table,keyspace=oracle,scope={table},name={name}"
    );
    let out = node.nodetool_ok(&["sjk", "mx", "-mg", "-b", &bean, "-f", "Count"]);
    out.lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .next_back()
        .unwrap_or_else(|| panic!("{name} of {table}: {out}"))
}

/// Every row of the table through the node, sorted (the node coordinates: RF 2, both
/// replicas hold every row).
fn rows(node: &Node, table: &str) -> Vec<String> {
    let mut v = node.select(&format!("SELECT token(pk), pk, ck, v FROM oracle.{table}"));
    v.sort();
    v
}

#[test]
fn operator_presplit_at_the_rings_tokens_makes_the_repairs_anticompaction_a_re_mark() {
    const TEST: &str = "pre-split job on the apiserver with a two-node Cassandra";
    if !control_plane_or_skip(TEST) {
        return;
    }
    if require(TEST, installed(V)).is_none() {
        return;
    }
    let Some(oracle) = oracle_or_skip(TEST, V) else {
        return;
    };
    let _one = node_lock();
    // The nodes' directories on XFS with reflink: the children share the parents' chunks.
    let Some(xfs) = xfs_or_skip(TEST, 2 << 30) else {
        return;
    };
    let d = tempfile::tempdir_in(&xfs.mount_point).unwrap();
    let mut a = Node::start(V, &d.path().join("a"), &[]).unwrap();
    let seeds = format!("127.0.0.1:{}", a.env["STORAGE_PORT"]);
    let mut b = Node::start(
        V,
        &d.path().join("b"),
        &[
            "--listen",
            "127.0.0.2",
            "--seeds",
            &seeds,
            "--initial-token",
            TOKEN_B,
        ],
    )
    .unwrap();
    let mut ddl = vec![
        "CREATE KEYSPACE oracle WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 2}".to_string(),
    ];
    // Compaction off in the schema (it survives the restart): only the repair moves sstables.
    for t in TABLES {
        ddl.push(format!("CREATE TABLE oracle.{t} (pk blob, ck int, v text, PRIMARY KEY (pk, ck)) WITH compaction = {{'class': 'SizeTieredCompactionStrategy', 'enabled': 'false'}}"));
    }
    a.cql(&ddl);
    let mut inserts = Vec::new();
    // Values that LZ4 cannot fold away, so that the table spans many chunks and a child
    // has chunks to share besides its boundary ones.
    let mut x = 0x9e3779b97f4a7c15u64;
    for t in TABLES {
        for p in 0..200u32 {
            for ck in 0..3 {
                let v: String = (0..25)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        format!("{x:016x}")
                    })
                    .collect();
                inserts.push(format!(
                    "INSERT INTO oracle.{t} (pk, ck, v) VALUES (0x{:08x}, {ck}, '{v}')",
                    p.wrapping_mul(2654435761)
                ));
            }
        }
    }
    a.cql(&inserts);
    for n in [&a, &b] {
        n.nodetool_ok(&["flush", "oracle"]);
    }
    let before: Vec<(Summary, Vec<String>)> = TABLES
        .iter()
        .map(|t| (oracle.row_digest(&data_files(&a, t)), rows(&a, t)))
        .collect();
    for (t, (s, r)) in TABLES.iter().zip(&before) {
        assert_eq!(s.count, 600, "{t}: every row on A: {s:?}");
        assert_eq!(r.len(), 600, "{t}");
    }
    let parents = data_files(&a, "presplit");

    // The ring as A's Cassandra describes it, through the management API's document.
    let ring = d.path().join("ring.json");
    std::fs::write(
        &ring,
        ring_json(&a.nodetool_ok(&["describering", "oracle"])),
    )
    .unwrap();
    let standin_dir = d.path().join("standin");
    std::fs::create_dir(&standin_dir).unwrap();
    let api = StandIn::start(d.path(), &standin_dir, &["--ring", ring.to_str().unwrap()]);
    let cluster = Cluster::start();
    cluster.apply_crds();
    let data = a.data_dir();
    let sidecar = Sidecar::start_with(&cluster, &data, &[], &["--management-api", &api.url()]);
    cluster.apply(&format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: before-repair\n  namespace: default\n  labels: {{cleave.dev/node: n1}}\nspec:\n  nodeName: n1\n  dataDirectory: {}\n  keyspace: oracle\n  tables: [presplit]\n  mode: PreSplit\n  publish: OnRestart\n",
        data.display()
    ));
    let s = cluster.wait("AwaitingRestart", Duration::from_secs(120), || {
        let o = cluster.get("acj", "before-repair")?;
        let p = o["status"]["phase"].as_str()?;
        assert_ne!(p, "Failed", "{:#?}\n{}", o["status"], sidecar.log());
        (p == "AwaitingRestart").then(|| o["status"].clone())
    });
    let results = s["results"].as_array().unwrap();
    assert_eq!(results.len(), parents.len(), "{s:#?}");
    for r in results {
        assert!(r["children"].as_array().unwrap().len() >= 2, "{r}");
    }
    let shared: u64 = results
        .iter()
        .map(|r| r["bytesShared"].as_u64().unwrap())
        .sum();
    assert!(shared > 0, "zero-copy: the children share chunks: {s:#?}");
    assert!(
        api.calls()
            .iter()
            .any(|c| c["path"] == "/api/v2/tokens/rangetoendpoint"),
        "the tokens came from the ring"
    );
    assert_eq!(
        data_files(&a, "presplit"),
        parents,
        "nothing live changes before the restart"
    );

    // The restart: Cassandra stops, the init container publishes, Cassandra starts.
    a.stop();
    common::apply_pending_ok(&data);
    a.start_again().unwrap();
    cluster.wait("Complete", Duration::from_secs(120), || {
        let o = cluster.get("acj", "before-repair")?;
        (o["status"]["phase"] == "Complete").then_some(())
    });
    let children = data_files(&a, "presplit");
    assert!(
        children.len() > parents.len() && !children.iter().any(|c| parents.contains(c)),
        "children replaced the parents: {parents:?} -> {children:?}"
    );
    assert_eq!(
        same_rows(oracle.row_digest(&children)),
        same_rows(before[0].0),
        "Cassandra's reader finds every row of the parents in the children, and no other"
    );
    assert_eq!(
        rows(&a, "presplit"),
        before[0].1,
        "SELECT after the publication"
    );

    // A real incremental repair of each node's primary range, once B sees A up again.
    cluster.wait("A up in B's view", Duration::from_secs(120), || {
        b.nodetool_ok(&["status"])
            .lines()
            .any(|l| l.starts_with("UN  127.0.0.1"))
            .then_some(())
    });
    for t in TABLES {
        for n in [&a, &b] {
            n.nodetool_ok(&["repair", "-pr", "oracle", t]);
        }
    }
    let anticompacted = |t| metric(&a, t, "BytesAnticompacted");
    let mutated = |t| metric(&a, t, "BytesMutatedAnticompaction");
    eprintln!(
        "A: presplit anticompacted {} mutated {}; plain anticompacted {} mutated {}",
        anticompacted("presplit"),
        mutated("presplit"),
        anticompacted("plain"),
        mutated("plain")
    );
    assert!(
        anticompacted("plain") > 0,
        "negative control: the repair anticompacts A's sstables that were not pre-split"
    );
    assert_eq!(
        anticompacted("presplit"),
        0,
        "the repair rewrote none of A's pre-split sstables"
    );
    assert!(mutated("presplit") > 0, "it re-marked them");
    for (t, (s, r)) in TABLES.iter().zip(&before) {
        assert_eq!(
            same_rows(oracle.row_digest(&data_files(&a, t))),
            same_rows(*s),
            "{t}: A's rows after the repair"
        );
        assert_eq!(&rows(&a, t), r, "{t}: SELECT after the repair");
    }
    drop(sidecar);
    b.stop();
    a.stop();
}

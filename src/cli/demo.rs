//! `cleave demo`: the main job on an embedded default, on a fresh machine with nothing
//! else — generate two sstables, write the AnticompactionJob an incremental repair would
//! create, run the local reconciler (`cleave run --local`) to completion, print the job's
//! status and check the children against the parents with the full integrity check.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cleave::gen::{self, Content, GenOptions};
use cleave::sstable::table::CheckLevel;
use cleave::sstable::{Partitioner, SSTable, Version};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Work directory (default: a temporary one, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Size of the generated table.
    #[arg(long, value_parser = super::gen::parse_size, default_value = "256MiB")]
    pub size: u64,
    /// Run on a loop-mounted XFS with reflink (needs root and mkfs.xfs) to see the children
    /// share the parent's chunks.
    #[arg(long, conflicts_with = "dir")]
    pub loop_xfs: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DemoArgs) -> Result<ExitCode> {
    let tmp;
    let mount;
    let dir = match (&a.dir, a.loop_xfs) {
        (Some(d), _) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        (None, true) => {
            if let Some(why) = cleave::io::loopfs::unavailable_reason() {
                anyhow::bail!("--loop-xfs: {why}");
            }
            mount = cleave::io::loopfs::LoopMount::new(
                &std::env::temp_dir(),
                2 * a.size + (512 << 20),
                "xfs",
            )?;
            mount.mount_point.clone()
        }
        (None, false) => {
            tmp = tempfile_dir()?;
            tmp.0.clone()
        }
    };
    let data = dir.join("data");
    let table = data.join("ks").join("t-6a3f4c2e1d2b11ef9c4e0242ac120002");
    std::fs::create_dir_all(&table)?;
    // Two sstables of a Cassandra 4.x table, as a node holds them before a repair.
    let mut parents = Vec::new();
    for (generation, size) in [(1u32, a.size), (2, a.size / 2)] {
        eprintln!(
            "cleave demo: generating {} MiB sstable {generation} in {}",
            size >> 20,
            table.display()
        );
        let bar = super::progress::bytes_bar(size, "generating");
        let g = gen::generate(
            &GenOptions {
                out: table.clone(),
                size,
                partition_size: 64 << 10,
                row_size: 4 << 10,
                version: Version::parse("nb").unwrap_or_else(|| unreachable!()),
                content: Content::Compressible,
                chunk_length: Some(16 << 10),
                partitioner: Partitioner::Murmur3,
                generation,
                seed: 21550 + generation as u64,
            },
            &mut |n| bar.inc(n),
        )?;
        bar.finish_and_clear();
        let _ = std::fs::remove_file(&g.schema);
        parents.push(g);
    }
    // The job an incremental repair would create after repairing two ranges, one of them
    // transient on this node.
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests)?;
    let session = uuid::Uuid::new_v4();
    let manifest = format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: demo-repair\nspec:\n  nodeName: demo-node\n  keyspace: ks\n  ranges:\n    - {{start: \"-9223372036854775808\", end: \"-3000000000000000000\"}}\n    - {{start: \"0\", end: \"3000000000000000000\"}}\n  transientRanges:\n    - {{start: \"-3000000000000000000\", end: \"-1500000000000000000\"}}\n  pendingRepair: {session}\n  digest: Combine\n"
    );
    let manifest_path = manifests.join("demo-repair.yaml");
    std::fs::write(&manifest_path, &manifest)?;
    eprintln!(
        "cleave demo: wrote {}; running the local reconciler (cleave run --local) to completion",
        manifest_path.display()
    );
    let metrics = cleave::operator::metrics::Metrics::new()?;
    let ctx = std::sync::Arc::new(cleave::operator::reconcile::Ctx::new(
        cleave::operator::local::LocalStore {
            dir: manifests.clone(),
        },
        "demo-node",
        data.clone(),
        metrics,
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(cleave::operator::local::run(
        ctx,
        std::time::Duration::from_millis(200),
        true,
    ))?;
    let status_text = std::fs::read_to_string(manifests.join("demo-repair.status.yaml"))?;
    let status: cleave::operator::crd::JobStatus = serde_saphyr::from_str(&status_text)?;
    // The children's check: each passes the full integrity check, and together they hold
    // exactly the parents' keys.
    let mut parents_fp = cleave::sstable::fingerprint::Fingerprint::default();
    for p in &parents {
        parents_fp.merge(
            &SSTable::open(&p.data)?
                .check(CheckLevel::Index, &mut |_| {})?
                .fingerprint,
        );
    }
    let mut children_fp = cleave::sstable::fingerprint::Fingerprint::default();
    let mut children = Vec::new();
    for r in &status.results {
        for c in &r.children {
            let t = SSTable::open(std::path::Path::new(c))?;
            let rep = t.check(CheckLevel::Full, &mut |_| {})?;
            children_fp.merge(&rep.fingerprint);
            let st = t.statistics.stats.as_ref();
            children.push(serde_json::json!({
                "path": c,
                "partitions": rep.partitions,
                "repairedAt": st.map(|s| s.repaired_at),
                "pendingRepair": st.and_then(|s| s.pending_repair.flatten()).map(|u| uuid::Uuid::from_bytes(u).to_string()),
                "isTransient": st.and_then(|s| s.is_transient),
            }));
        }
    }
    let ok = status.phase == Some(cleave::operator::status::Phase::Complete)
        && parents_fp == children_fp;
    if a.json {
        let v = serde_json::json!({"status": status, "children": children, "check": {"parents": parents_fp, "children": children_fp, "ok": ok}});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("# {}", manifests.join("demo-repair.status.yaml").display());
        print!("{status_text}");
        println!("# children");
        for c in &children {
            println!(
                "{}  {} partitions  repairedAt {} pendingRepair {} transient {}",
                c["path"].as_str().unwrap_or(""),
                c["partitions"],
                c["repairedAt"],
                c["pendingRepair"].as_str().unwrap_or("-"),
                c["isTransient"]
            );
        }
        println!(
            "# check: parents ({}, {:016x}, {:016x}) = children ({}, {:016x}, {:016x}): {}; every child passes the full check",
            parents_fp.count,
            parents_fp.xor,
            parents_fp.sum,
            children_fp.count,
            children_fp.xor,
            children_fp.sum,
            if ok { "ok" } else { "MISMATCH" }
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A temporary directory removed on drop (the project's own, to keep tempfile a
/// dev-dependency).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempfile_dir() -> Result<TempDir> {
    let d = std::env::temp_dir().join(format!("cleave-demo-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d)?;
    Ok(TempDir(d))
}

//! `cleave demo`: the main job on an embedded default, on a fresh machine with nothing
//! else — generate a table, anticompact it (repaired / pending / unrepaired), check the
//! children against the parent and with the full integrity check, print what happened.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cleave::gen::{self, Content, GenOptions};
use cleave::split::execute::{self, DigestPolicy, SplitOptions};
use cleave::split::publish::Publish;
use cleave::split::spec::{Cut, RepairSession, RepairedRanges};
use cleave::sstable::table::CheckLevel;
use cleave::sstable::{Partitioner, SSTable, Token, TokenRange, Version};

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
    let table = dir.join("ks").join("t-6a3f4c2e1d2b11ef9c4e0242ac120002");
    std::fs::create_dir_all(&table)?;
    eprintln!(
        "cleave demo: generating {} MiB of a Cassandra 4.x (nb) table in {}",
        a.size >> 20,
        table.display()
    );
    let bar = super::progress::bytes_bar(a.size, "generating");
    let g = gen::generate(
        &GenOptions {
            out: table.clone(),
            size: a.size,
            partition_size: 64 << 10,
            row_size: 4 << 10,
            version: Version::parse("nb").unwrap_or_else(|| unreachable!()),
            content: Content::Compressible,
            chunk_length: Some(16 << 10),
            partitioner: Partitioner::Murmur3,
            generation: 1,
            seed: 21550,
        },
        &mut |n| bar.inc(n),
    )?;
    bar.finish_and_clear();
    // A repair session covered two ranges of the ring (one of them transient here).
    let m = |v: i64| Token::Murmur3(v);
    let session = *uuid::Uuid::new_v4().as_bytes();
    let cut = Cut::Ranges(RepairedRanges {
        full: vec![
            TokenRange::new(m(i64::MIN), m(-3_000_000_000_000_000_000)),
            TokenRange::new(m(0), m(3_000_000_000_000_000_000)),
        ],
        transient: vec![TokenRange::new(
            m(-3_000_000_000_000_000_000),
            m(-1_500_000_000_000_000_000),
        )],
        session: RepairSession::Pending(session),
    });
    let out = table.join("anticompacted");
    std::fs::create_dir_all(&out)?;
    eprintln!(
        "cleave demo: anticompacting {} into {}",
        g.data.display(),
        out.display()
    );
    let opts = SplitOptions {
        cut,
        layout: None,
        allow_padded: false,
        digest: DigestPolicy::Combine,
        merge_below_chunks: 8,
        out_dir: out.clone(),
        publish: Publish::Stage,
        dry_run: false,
        operation: "anticompaction".into(),
    };
    let report = execute::split(&g.data, &opts, &mut |_| {})?;
    let mut verified = Vec::new();
    for c in &report.children {
        let t = SSTable::open(&c.path)?;
        let r = t.check(CheckLevel::Full, &mut |_| {})?;
        verified.push((c.path.clone(), r.partitions));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "parent   {} ({} partitions, {} MiB on disk)",
            g.data.display(),
            g.partitions,
            g.data_file_bytes >> 20
        );
        println!("reflink  {}", report.reflink);
        for c in &report.children {
            println!(
                "child    {} {:<10} {:>6} partitions  repairedAt {} pending {} transient {}  {:?}: shared {} KiB copied {} KiB re-encoded {} KiB{}",
                c.path.file_name().and_then(|n| n.to_str()).unwrap_or(""),
                c.label.map(|l| l.to_string()).unwrap_or_default(),
                c.partitions,
                c.repaired_at.unwrap_or(0),
                c.pending_repair.as_deref().unwrap_or("-"),
                c.is_transient.unwrap_or(false),
                c.layout,
                c.bytes_shared >> 10,
                c.bytes_copied >> 10,
                c.bytes_reencoded >> 10,
                c.fallback_reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
            );
        }
        println!(
            "check    parent ({}, {:016x}, {:016x}) = children ({}, {:016x}, {:016x}): {}; every child passes the full check ({} partitions)",
            report.check.parent.count,
            report.check.parent.xor,
            report.check.parent.sum,
            report.check.children.count,
            report.check.children.xor,
            report.check.children.sum,
            if report.check.ok { "ok" } else { "MISMATCH" },
            verified.iter().map(|v| v.1).sum::<u64>()
        );
    }
    Ok(if report.check.ok {
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

//! `cleave demo`: the main job on an embedded default, on a fresh machine with nothing
//! else — generate two sstables, write the AnticompactionJob an incremental repair would
//! create, run the local reconciler (`cleave run --local`) to completion, check the children
//! against the parents with the full integrity check, and end with a summary a newcomer
//! reads at a glance (the whole status is behind `--json`, or in the status file with
//! `--dir`). Where the directory cannot share extents it says so once, and how to see
//! sharing.

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
            install_xfsprogs_if_missing();
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
    // Whether this directory can share extents at all: said once, before the work.
    let sharing =
        std::fs::File::open(&parents[0].data).and_then(|f| cleave::io::reflink::probe(&f, &table));
    if let Ok(cleave::io::reflink::ReflinkSupport::Refused(why)) = &sharing {
        eprintln!("cleave demo: {}", no_sharing_hint(&dir, &why.to_string()));
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
    let ctx = std::sync::Arc::new(cleave::operator::core::Ctx::new(
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
    let started = std::time::Instant::now();
    rt.block_on(cleave::operator::local::run(
        ctx,
        std::time::Duration::from_millis(200),
        true,
    ))?;
    let job_time = started.elapsed();
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
        let parent_bytes: u64 = parents
            .iter()
            .map(|p| std::fs::metadata(&p.data).map_or(0, |m| m.len()))
            .sum();
        let kinds = children.iter().fold([0usize; 4], |mut k, c| {
            let i = if c["isTransient"] == true {
                1
            } else if c["pendingRepair"].is_string() {
                0
            } else if c["repairedAt"].as_i64().is_some_and(|t| t > 0) {
                2
            } else {
                3
            };
            k[i] += 1;
            k
        });
        let p = &status.progress;
        let status_file = manifests.join("demo-repair.status.yaml");
        let summary = Summary {
            phase: status.phase.map_or("?", |p| p.as_str()),
            seconds: job_time.as_secs_f64(),
            parents: parents.len(),
            parent_bytes,
            partitions: parents_fp.count,
            children: children.len(),
            kinds,
            shared: p.bytes_shared,
            copied: p.bytes_copied,
            reencoded: p.bytes_reencoded,
            keys_match: parents_fp == children_fp,
            status_file: a.dir.is_some().then_some(status_file.as_path()),
        };
        print!("{}", summary.render());
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

/// What a newcomer reads at the end of `cleave demo`.
struct Summary<'a> {
    phase: &'a str,
    seconds: f64,
    parents: usize,
    parent_bytes: u64,
    partitions: u64,
    children: usize,
    /// pending, transient, repaired, unrepaired
    kinds: [usize; 4],
    shared: u64,
    copied: u64,
    reencoded: u64,
    keys_match: bool,
    /// Kept only with `--dir`; the default temporary directory is removed on exit.
    status_file: Option<&'a std::path::Path>,
}

impl Summary<'_> {
    fn render(&self) -> String {
        let total = (self.shared + self.copied + self.reencoded).max(1);
        let pct = |n: u64| 100.0 * n as f64 / total as f64;
        let [pending, transient, repaired, unrepaired] = self.kinds;
        let mut kinds = Vec::new();
        for (n, what) in [
            (pending, "pending repair"),
            (repaired, "repaired"),
            (transient, "transient"),
            (unrepaired, "unrepaired"),
        ] {
            if n > 0 {
                kinds.push(format!("{n} {what}"));
            }
        }
        let mut out = format!(
            "AnticompactionJob demo-repair: {} in {:.1} s\n",
            self.phase, self.seconds
        );
        out += &format!(
            "  parents   {} sstables, {}, {} partitions\n",
            self.parents,
            human(self.parent_bytes),
            self.partitions
        );
        out += &format!(
            "  children  {} sstables ({})\n",
            self.children,
            kinds.join(", ")
        );
        out += &format!(
            "  bytes     shared {} ({:.0}%), copied {} ({:.0}%), re-encoded {} ({:.0}%)\n",
            human(self.shared),
            pct(self.shared),
            human(self.copied),
            pct(self.copied),
            human(self.reencoded),
            pct(self.reencoded)
        );
        out += &format!(
            "  check     {}\n",
            if self.keys_match {
                "ok: the children hold exactly the parents' keys, and each passes the full check"
            } else {
                "MISMATCH: the children's keys differ from the parents'"
            }
        );
        out += &match self.status_file {
            Some(f) => format!("  status    {} (all of it: --json)\n", f.display()),
            None => "  status    --json prints all of it; --dir DIR keeps the files\n".to_string(),
        };
        out
    }
}

fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// One line: this directory cannot share extents, and how to see sharing here.
fn no_sharing_hint(dir: &std::path::Path, why: &str) -> String {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let how = if root {
        "run `cleave demo --loop-xfs` (a loop-mounted XFS with reflink; installs xfsprogs with apt-get if missing)"
    } else {
        "run `sudo cleave demo --loop-xfs` (a loop-mounted XFS with reflink)"
    };
    format!(
        "{}: {why}, so the children are copied. To see them share the parents' chunks, {how}, or pass --dir on XFS (reflink=1) or btrfs.",
        dir.display()
    )
}

/// `--loop-xfs` on a machine without mkfs.xfs: as root with apt-get, install xfsprogs (the
/// flag asked for an XFS; saying so first). Anything else is left to the error that follows.
fn install_xfsprogs_if_missing() {
    let have = |c: &str| {
        std::process::Command::new(c)
            .arg("-V")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok()
    };
    // SAFETY: geteuid has no preconditions.
    if have("mkfs.xfs") || unsafe { libc::geteuid() } != 0 || !have("apt-get") {
        return;
    }
    eprintln!("cleave demo: mkfs.xfs not found; installing xfsprogs (apt-get install -y xfsprogs)");
    let ok = std::process::Command::new("sh")
        .args([
            "-c",
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xfsprogs",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("cleave demo: installing xfsprogs failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_reads_at_a_glance() {
        let s = Summary {
            phase: "Complete",
            seconds: 1.25,
            parents: 2,
            parent_bytes: 384 << 20,
            partitions: 6144,
            children: 6,
            kinds: [2, 2, 0, 2],
            shared: 3 << 20,
            copied: 1 << 20,
            reencoded: 0,
            keys_match: true,
            status_file: None,
        }
        .render();
        assert_eq!(s.lines().count(), 6, "{s}");
        assert!(
            s.starts_with("AnticompactionJob demo-repair: Complete in 1.2 s\n"),
            "{s}"
        );
        assert!(
            s.contains("parents   2 sstables, 384.0 MiB, 6144 partitions"),
            "{s}"
        );
        assert!(
            s.contains("children  6 sstables (2 pending repair, 2 transient, 2 unrepaired)"),
            "{s}"
        );
        assert!(
            s.contains("shared 3.0 MiB (75%), copied 1.0 MiB (25%), re-encoded 0 B (0%)"),
            "{s}"
        );
        assert!(s.contains("check     ok"), "{s}");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(5 << 30), "5.0 GiB");
    }
}

//! `cleave bench cleanup` (issue 19): a table of several generated sstables on a fresh XFS
//! (reflink=1) loop mount, a ring of `nodes` nodes with `vnodes` tokens each at RF 1 (the
//! node owns about 1/`nodes`), cleaned up with `cleave cleanup --publish replace` beside a
//! byte copy of the table's Data.db files (`cp --reflink=never`, a lower bound on what
//! Cassandra's rewrite costs: it also decompresses and recompresses every byte it keeps),
//! both cold, iteration by iteration.
//!
//! Each iteration restores the table from a pristine copy by reflink (untimed), empties the
//! page cache (`measure::make_cold`), and measures the child process from outside
//! (`io::child`: wall, rusage, `/proc/<pid>/io`) plus a `syncfs` of the filesystem right
//! after it exits, so that `cp`, which does not fsync, pays for its writeback too.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::split::fixture::{loop_device, loop_direct_io};
use super::split::measure::{clear_dir, files_in, loadavg1, make_cold, syncfs};
use super::{ScratchDir, Stat};
use crate::io::{child, loopfs};

const GIB: u64 = 1 << 30;

#[derive(Debug, Clone)]
pub struct CleanupBenchOptions {
    /// This binary (runs `gen` and `cleanup`).
    pub exe: PathBuf,
    /// Uncompressed Data.db bytes of the whole table.
    pub size: u64,
    pub sstables: u32,
    pub nodes: u64,
    pub vnodes: u64,
    pub chunk: u64,
    pub partition_size: u64,
    pub iterations: u32,
    pub dir: Option<PathBuf>,
}

/// One timed run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub tool: &'static str,
    pub iteration: u32,
    pub process_wall_s: f64,
    pub sync_s: f64,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Parent bytes in the page cache right before the run.
    pub parent_resident_bytes: u64,
    /// cleanup only: from its JSON report.
    pub kept: u64,
    pub dropped: u64,
    pub split: u64,
    pub children: u64,
    pub partitions_dropped: u64,
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
    /// cleanup only: the children's files other than Data.db (the rebuilt components).
    pub rebuilt_component_bytes: u64,
    /// cleanup only: the bound on bytes written: rebuilt components + 2 chunks a
    /// zero-copy child + every byte of a merged (`regrid`) child's Data.db.
    pub write_bound_bytes: u64,
    pub load1: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Output {
    pub size_bytes: u64,
    pub sstables: u32,
    pub data_file_bytes: u64,
    pub nodes: u64,
    pub vnodes: u64,
    pub owned_ranges: usize,
    pub runs: Vec<Run>,
    pub cleanup_wall: Stat,
    pub copy_wall: Stat,
    pub cleanup_cpu: Stat,
    pub copy_cpu: Stat,
    /// Median byte-copy wall / median cleanup wall (target ≥ 100).
    pub speedup: f64,
    pub markdown: String,
}

/// The ranges node 0 owns: `nodes × vnodes` evenly spaced tokens dealt round-robin, each
/// node owning `(previous token, its token]` (RF 1, as `TokenMetadata` assigns primary
/// ranges); the first range wraps around the ring's end.
pub fn ring_ranges(nodes: u64, vnodes: u64) -> Vec<(i64, i64)> {
    let n = (nodes * vnodes).max(1);
    let step = u64::MAX / n;
    let tok = |i: u64| (i64::MIN as i128 + (i as i128) * step as i128 + 1) as i64;
    (0..n)
        .filter(|i| i % nodes.max(1) == 0)
        .map(|i| (if i == 0 { tok(n - 1) } else { tok(i - 1) }, tok(i)))
        .collect()
}

fn run_cmd(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

pub fn run(a: &CleanupBenchOptions) -> Result<Output> {
    if let Some(why) = loopfs::unavailable_reason() {
        bail!("cleave bench cleanup needs an XFS loop mount: {why}");
    }
    let scratch = ScratchDir::new(a.dir.as_deref())?;
    // The table, its pristine reflinked copy (shares the extents), the byte copy, slack.
    let image_size = 2 * a.size + 2 * GIB;
    let mount = loopfs::LoopMount::new(scratch.path(), image_size, "xfs")
        .context("mounting the XFS loop file")?;
    let dev = loop_device(&mount.mount_point);
    loop_direct_io(dev.as_deref());
    let mnt = mount.mount_point.clone();
    let id = "t-0123456789abcdef0123456789abcdef";
    let pristine = mnt.join("pristine/ks").join(id);
    let table = mnt.join("work/ks").join(id);
    let copy = mnt.join("copy");
    for d in [&pristine, &table, &copy] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let per = a.size / u64::from(a.sstables.max(1));
    for g in 1..=a.sstables {
        eprintln!(
            "bench cleanup: generating sstable {g}/{} ({per} bytes)",
            a.sstables
        );
        run_cmd(
            Command::new(&a.exe)
                .arg("gen")
                .arg("--out")
                .arg(&pristine)
                .args(["--size", &per.to_string()])
                .args(["--partition-size", &a.partition_size.to_string()])
                .args(["--chunk", &a.chunk.to_string()])
                .args(["--generation", &g.to_string()])
                .args(["--seed", &(1000 + g).to_string()])
                .arg("--compressible"),
        )?;
    }
    let data_files: Vec<PathBuf> = files_in(&pristine)?
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with("-Data.db"))
        .collect();
    let data_file_bytes: u64 = data_files
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let ranges = ring_ranges(a.nodes, a.vnodes);
    let ranges_file = mnt.join("owned.yaml");
    std::fs::write(
        &ranges_file,
        ranges
            .iter()
            .map(|(l, r)| format!("- {{start: \"{l}\", end: \"{r}\"}}\n"))
            .collect::<String>(),
    )?;
    let image = mount.image().to_path_buf();
    let mut runs = Vec::new();
    for it in 1..=a.iterations {
        // The byte copy of every Data.db.
        clear_dir(&copy)?;
        syncfs(&copy)?;
        let cache = make_cold(&data_files, Some(&image))?;
        let mut cmd = Command::new("cp");
        cmd.arg("--reflink=never").args(&data_files).arg(&copy);
        let m = child::measure(&mut cmd).context("cp")?;
        if m.exit_code != Some(0) {
            bail!("cp failed: {}", m.stderr.trim());
        }
        let sync = syncfs(&copy)?;
        runs.push(Run {
            tool: "cp --reflink=never (Data.db)",
            iteration: it,
            process_wall_s: m.wall.as_secs_f64(),
            sync_s: sync.as_secs_f64(),
            wall_s: (m.wall + sync).as_secs_f64(),
            cpu_s: (m.user + m.system).as_secs_f64(),
            read_bytes: m.io.read_bytes,
            write_bytes: m.io.write_bytes,
            parent_resident_bytes: cache.parent_resident_bytes,
            kept: 0,
            dropped: 0,
            split: 0,
            children: 0,
            partitions_dropped: 0,
            bytes_shared: 0,
            bytes_copied: 0,
            bytes_reencoded: 0,
            rebuilt_component_bytes: 0,
            write_bound_bytes: 0,
            load1: loadavg1(),
        });
        clear_dir(&copy)?;

        // The cleanup, on the table restored from the pristine copy by reflink.
        clear_dir(&table)?;
        for f in files_in(&pristine)? {
            run_cmd(
                Command::new("cp")
                    .arg("--reflink=always")
                    .arg(&f)
                    .arg(&table),
            )?;
        }
        syncfs(&table)?;
        let parents: Vec<PathBuf> = files_in(&table)?;
        let cache = make_cold(&parents, Some(&image))?;
        let mut cmd = Command::new(&a.exe);
        cmd.arg("cleanup")
            .arg(&table)
            .arg("--owned-ranges")
            .arg(&ranges_file)
            .arg("--json");
        let m = child::measure(&mut cmd).context("cleave cleanup")?;
        if m.exit_code != Some(0) {
            bail!("cleave cleanup failed: {}", m.stderr.trim());
        }
        let sync = syncfs(&table)?;
        let r: serde_json::Value =
            serde_json::from_slice(&m.stdout).context("cleanup --json output")?;
        let chunk = a.chunk;
        let (mut rebuilt, mut bound) = (0u64, 0u64);
        for s in r["sstables"].as_array().into_iter().flatten() {
            for c in s["children"].as_array().into_iter().flatten() {
                let data = PathBuf::from(c["path"].as_str().unwrap_or(""));
                let comps = components_bytes(&data);
                rebuilt += comps;
                bound += comps
                    + if c["layout"] == "regrid" {
                        u(c, "data_file_bytes")
                    } else {
                        2 * chunk
                    };
            }
        }
        runs.push(Run {
            tool: "cleave cleanup --publish replace",
            iteration: it,
            process_wall_s: m.wall.as_secs_f64(),
            sync_s: sync.as_secs_f64(),
            wall_s: (m.wall + sync).as_secs_f64(),
            cpu_s: (m.user + m.system).as_secs_f64(),
            read_bytes: m.io.read_bytes,
            write_bytes: m.io.write_bytes,
            parent_resident_bytes: cache.parent_resident_bytes,
            kept: u(&r, "kept"),
            dropped: u(&r, "dropped"),
            split: u(&r, "split"),
            children: u(&r, "children"),
            partitions_dropped: u(&r, "partitions_dropped"),
            bytes_shared: u(&r, "bytes_shared"),
            bytes_copied: u(&r, "bytes_copied"),
            bytes_reencoded: u(&r, "bytes_reencoded"),
            rebuilt_component_bytes: rebuilt,
            write_bound_bytes: bound,
            load1: loadavg1(),
        });
    }
    let pick = |tool_prefix: &str, f: fn(&Run) -> f64| -> Stat {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.tool.starts_with(tool_prefix))
            .map(f)
            .collect();
        Stat::of(&v)
    };
    let cleanup_wall = pick("cleave", |r| r.wall_s);
    let copy_wall = pick("cp", |r| r.wall_s);
    let cleanup_cpu = pick("cleave", |r| r.cpu_s);
    let copy_cpu = pick("cp", |r| r.cpu_s);
    let speedup = if cleanup_wall.median > 0.0 {
        copy_wall.median / cleanup_wall.median
    } else {
        0.0
    };
    let markdown = markdown(a, data_file_bytes, ranges.len(), &runs, speedup);
    drop(mount);
    drop(scratch);
    Ok(Output {
        size_bytes: a.size,
        sstables: a.sstables,
        data_file_bytes,
        nodes: a.nodes,
        vnodes: a.vnodes,
        owned_ranges: ranges.len(),
        runs,
        cleanup_wall,
        copy_wall,
        cleanup_cpu,
        copy_cpu,
        speedup,
        markdown,
    })
}

/// Apparent bytes of an sstable's files other than Data.db.
fn components_bytes(data: &Path) -> u64 {
    let Some(dir) = data.parent() else { return 0 };
    let Some(name) = data.file_name().and_then(|n| n.to_str()) else {
        return 0;
    };
    let prefix = name.trim_end_matches("Data.db");
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(prefix) && !n.ends_with("-Data.db"))
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1u64 << 20) as f64)
}

fn markdown(
    a: &CleanupBenchOptions,
    data_file_bytes: u64,
    ranges: usize,
    runs: &[Run],
    speedup: f64,
) -> String {
    let mut s = format!(
        "table: {} sstables, {} GiB uncompressed, {} MiB of Data.db; ring {} nodes × {} tokens, RF 1: {} owned ranges; XFS loop (reflink=1, direct I/O), cold cache\n\n",
        a.sstables,
        a.size as f64 / GIB as f64,
        mib(data_file_bytes),
        a.nodes,
        a.vnodes,
        ranges
    );
    s += "| run | tool | wall s (process + syncfs) | CPU s | read MiB | written MiB | kept/dropped/split → children | shared / copied / re-encoded MiB | rebuilt components MiB | write bound MiB | load |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    for r in runs {
        let cleave = r.tool.starts_with("cleave");
        s += &format!(
            "| {} | {} | {:.3} ({:.3} + {:.3}) | {:.3} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.iteration,
            r.tool,
            r.wall_s,
            r.process_wall_s,
            r.sync_s,
            r.cpu_s,
            mib(r.read_bytes),
            mib(r.write_bytes),
            if cleave {
                format!("{}/{}/{} → {}", r.kept, r.dropped, r.split, r.children)
            } else {
                "—".into()
            },
            if cleave {
                format!(
                    "{} / {} / {}",
                    mib(r.bytes_shared),
                    mib(r.bytes_copied),
                    mib(r.bytes_reencoded)
                )
            } else {
                "—".into()
            },
            if cleave {
                mib(r.rebuilt_component_bytes)
            } else {
                "—".into()
            },
            if cleave {
                mib(r.write_bound_bytes)
            } else {
                "—".into()
            },
            r.load1.map_or("?".into(), |l| format!("{l:.1}"))
        );
    }
    s += &format!("\nmedian wall: byte copy / cleanup = {speedup:.1}× (target ≥ 100×)\n");
    s
}

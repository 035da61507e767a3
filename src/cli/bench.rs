//! `cleave bench <kind>`: the arguments of the benchmarks reported in
//! `docs/benchmarks.md`, and their output. What they measure and how is in `cleave::bench`.
//!
//! Benchmarks, not tests: machines are shared and noisy, so each kind measures several
//! iterations in one run and reports the median and the min–max, and ratios between
//! sizes measured in that same run.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cleave::bench::index;
use cleave::bench::split::{self, SplitBenchOptions};

use crate::cli::gen::parse_size;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub kind: BenchKind,
}

#[derive(clap::Subcommand)]
pub enum BenchKind {
    /// Stream a synthetic Index.db with IndexReader: throughput and peak RSS per entry count.
    Index(IndexBenchArgs),
    /// Split a generated parent 8 ways in every layout on an XFS loop mount, cold cache,
    /// against cp and cp --reflink: the CASSANDRA-21550 table (needs root and mkfs.xfs).
    Split(SplitBenchArgs),
    /// Clean up a table of several generated sstables on an XFS loop mount to a third of a
    /// 3-node vnode ring, cold, against a byte copy of its Data.db files (issue 19).
    Cleanup(CleanupBenchArgs),
    /// Make an 8-way split's files durable by each strategy (serial fsync, a pool, fdatasync,
    /// syncfs) in --dir: the measurement behind docs/split.md "Durability".
    Fsync(FsyncBenchArgs),
}

#[derive(clap::Args)]
pub struct FsyncBenchArgs {
    /// Children whose ~8 files each are made durable.
    #[arg(long, default_value_t = 8)]
    pub children: usize,
    /// Multiplies every file size (1: ~2.5 MiB a child).
    #[arg(long, default_value_t = 1)]
    pub scale: u64,
    #[command(flatten)]
    pub common: CommonArgs,
}

fn run_fsync(a: FsyncBenchArgs) -> Result<ExitCode> {
    let dir = a.common.dir.clone().unwrap_or_else(std::env::temp_dir);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let m = cleave::bench::fsync::run(&dir, a.children, a.scale, a.common.iterations)
        .with_context(|| format!("fsync bench in {}", dir.display()))?;
    if a.common.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"load": load.trim(), "results": m}))?
        );
    } else {
        println!("load average: {}", load.trim());
        let serial = m.first().map_or(0.0, |s| s.median);
        for r in &m {
            println!(
                "{:<24} {:>4} files {:>8.1} MiB  median {:>8.2} ms  ({:.1}x serial)  all: {}",
                r.strategy,
                r.files,
                r.bytes as f64 / (1 << 20) as f64,
                r.median * 1e3,
                if r.median > 0.0 {
                    serial / r.median
                } else {
                    0.0
                },
                r.seconds
                    .iter()
                    .map(|s| format!("{:.1}", s * 1e3))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct CleanupBenchArgs {
    /// Uncompressed Data.db bytes of the whole table.
    #[arg(long, value_parser = parse_size, default_value = "8GiB")]
    pub size: u64,
    /// Sstables the table is made of (equal sizes).
    #[arg(long, default_value_t = 4)]
    pub sstables: u32,
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// Tokens per node (num_tokens).
    #[arg(long, default_value_t = 16)]
    pub vnodes: u64,
    #[arg(long, value_parser = parse_size, default_value = "16KiB")]
    pub chunk: u64,
    #[arg(long, value_parser = parse_size, default_value = "64KiB")]
    pub partition_size: u64,
    #[command(flatten)]
    pub common: CommonArgs,
}

fn run_cleanup(a: CleanupBenchArgs) -> Result<ExitCode> {
    let opts = cleave::bench::cleanup::CleanupBenchOptions {
        exe: std::env::current_exe().context("locating this binary")?,
        size: a.size,
        sstables: a.sstables,
        nodes: a.nodes,
        vnodes: a.vnodes,
        chunk: a.chunk,
        partition_size: a.partition_size,
        iterations: a.common.iterations,
        dir: a.common.dir,
    };
    let out = cleave::bench::cleanup::run(&opts)?;
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", out.markdown);
    }
    Ok(ExitCode::SUCCESS)
}

/// Options every benchmark kind takes.
#[derive(clap::Args)]
pub struct CommonArgs {
    /// Measured passes per size; the median and min–max are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,
    /// Where to create the scratch directory for generated files (default: the system
    /// temporary directory). It is removed afterwards.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct IndexBenchArgs {
    /// Index.db entry counts to generate and stream, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000000,10000000",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub entries: Vec<u64>,
    #[command(flatten)]
    pub common: CommonArgs,
}

pub fn run(args: BenchArgs) -> Result<ExitCode> {
    match args.kind {
        BenchKind::Index(a) => run_index(a),
        BenchKind::Split(a) => run_split(a),
        BenchKind::Fsync(a) => run_fsync(a),
        BenchKind::Cleanup(a) => run_cleanup(a),
    }
}

const GIB: u64 = 1 << 30;

/// A size argument where a bare number means GiB (`--sizes 1,2,4`), or `512MiB`.
fn parse_gib(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let n: f64 = t.parse().map_err(|_| format!("{s:?}: not a number"))?;
        Ok((n * GIB as f64) as u64)
    } else {
        parse_size(t)
    }
}

#[derive(clap::Args)]
pub struct SplitBenchArgs {
    /// Parent sizes (uncompressed Data.db length, `cleave gen --size`), comma separated; a
    /// bare number is GiB.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16", value_parser = parse_gib)]
    pub sizes: Vec<u64>,
    /// Children per split.
    #[arg(long, default_value_t = 8)]
    pub parts: usize,
    #[arg(long, value_parser = parse_size, default_value = "64KiB")]
    pub partition_size: u64,
    #[arg(long, value_parser = parse_size, default_value = "4KiB")]
    pub row_size: u64,
    /// LZ4 chunk length of the parent.
    #[arg(long, value_parser = parse_size, default_value = "16KiB")]
    pub chunk: u64,
    /// BIG version of the parent.
    #[arg(long, default_value = "nb")]
    pub version: String,
    /// Partition size of the extra `aligned, no digest` parent (same total bytes, fewer
    /// partitions); 0 skips it.
    #[arg(long, value_parser = parse_size, default_value = "1MiB")]
    pub wide_partition_size: u64,
    /// Size of that parent; default the largest of --sizes.
    #[arg(long, value_parser = parse_gib)]
    pub wide_size: Option<u64>,
    /// Size of the incompressible (`gen --random`) parent; default the largest of --sizes;
    /// 0 skips it.
    #[arg(long, value_parser = parse_gib)]
    pub random_size: Option<u64>,
    /// Extra cold splits of the incompressible parent, each at its own seeded random token
    /// cuts (--parts - 1 tokens), so that its fallback count covers more than one cut set.
    #[arg(long, default_value_t = 8)]
    pub random_cut_sets: u32,
    /// Run only these configurations, comma separated: regrid, copy, copy-plain,
    /// digest-full, digest-combine, aligned, aligned-4.1, padded, cp, cp-reflink (default:
    /// all but aligned-4.1). `aligned` splits for the default target (children a 5.0.5+
    /// node reads: filler partitions); aligned-4.1 is the same split with
    /// `--target-cassandra 4.1` (a dead prefix allowed).
    #[arg(long, value_delimiter = ',')]
    pub configs: Option<Vec<String>>,
    /// Another cleave binary (e.g. a build of main): every `aligned, no digest` and `regrid`
    /// run of a compressible parent is repeated with it in the same run, for a before/after.
    #[arg(long)]
    pub baseline_exe: Option<PathBuf>,
    /// Skip the warm-cache digest runs at the largest size and the readahead-0 `combine`
    /// runs at the smallest.
    #[arg(long)]
    pub no_warm: bool,
    /// Write split.csv, split.json, split.svg and split.md into this directory.
    #[arg(long)]
    pub report_dir: Option<PathBuf>,
    /// Measure nothing: recompute the tables, targets and plot from a previous run's
    /// split.json (with --report-dir, rewrite its files).
    #[arg(long)]
    pub from_json: Option<PathBuf>,
    #[command(flatten)]
    pub common: CommonArgs,
}

fn run_split(a: SplitBenchArgs) -> Result<ExitCode> {
    let opts = SplitBenchOptions {
        sizes: a.sizes,
        parts: a.parts,
        partition_size: a.partition_size,
        row_size: a.row_size,
        chunk: a.chunk,
        version: a.version,
        wide_partition_size: a.wide_partition_size,
        wide_size: a.wide_size,
        random_size: a.random_size,
        random_cut_sets: a.random_cut_sets,
        configs: a.configs,
        baseline_exe: a.baseline_exe,
        no_warm: a.no_warm,
        report_dir: a.report_dir,
        iterations: a.common.iterations,
        dir: a.common.dir,
    };
    let out = match &a.from_json {
        Some(path) => split::from_json(&opts, path)?,
        None => split::run(&opts)?,
    };
    if a.common.json {
        print!("{}", out.json);
    } else {
        print!("{}", out.markdown);
    }
    Ok(ExitCode::SUCCESS)
}

fn run_index(a: IndexBenchArgs) -> Result<ExitCode> {
    let report = index::run(&index::IndexOptions {
        entries: a.entries,
        iterations: a.common.iterations,
        dir: a.common.dir,
    })?;
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", index::render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_gib_or_units() {
        assert_eq!(parse_gib("1"), Ok(GIB));
        assert_eq!(parse_gib("0.5"), Ok(GIB / 2));
        assert_eq!(parse_gib("512MiB"), Ok(512 << 20));
        assert!(parse_gib("x").is_err());
    }
}

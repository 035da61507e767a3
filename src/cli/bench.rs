//! `cleave bench <kind>`: throughput and memory benchmarks, reported in
//! `docs/benchmarks.md`.
//!
//! Benchmarks, not tests: machines are shared and noisy, so each kind measures several
//! iterations in one run and reports the median and the min–max, and ratios between
//! sizes measured in that same run. Measurement helpers (peak RSS, CPU time, I/O
//! counters) are in `cleave::io::proc`.

use std::fs::File;
use std::hint::black_box;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cleave::io::proc;
use cleave::sstable::index::{IndexReader, IndexWriter};
use serde::Serialize;

mod split;

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
    Split(split::SplitBenchArgs),
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
        BenchKind::Split(a) => split::run(a),
        BenchKind::Fsync(a) => run_fsync(a),
    }
}

// ---------------------------------------------------------------------------------------
// Shared helpers

/// Median and range of one measured quantity over the iterations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    /// Panics on an empty slice (every benchmark measures at least one iteration).
    pub fn of(values: &[f64]) -> Stat {
        assert!(!values.is_empty(), "no measurements");
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Stat {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    /// `median (min–max)` with each value formatted by `f`.
    fn show(&self, f: impl Fn(f64) -> String) -> String {
        format!("{} ({}–{})", f(self.median), f(self.min), f(self.max))
    }
}

/// A directory removed (with its contents) when dropped.
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    pub fn new(parent: Option<&Path>) -> Result<ScratchDir> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = parent.join(format!("cleave-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path)
            .with_context(|| format!("creating scratch directory {}", path.display()))?;
        Ok(ScratchDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// SplitMix64: deterministic, fast, good enough for synthetic data (no `rand` needed).
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (modulo bias is irrelevant here).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

fn mb(bytes: f64) -> f64 {
    bytes / 1e6
}

fn kib(bytes: f64) -> f64 {
    bytes / 1024.0
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

// ---------------------------------------------------------------------------------------
// bench index

/// Shape of the synthetic Index.db.
const KEY_LEN: (u64, u64) = (8, 40);
/// Partition sizes (Data.db bytes between consecutive positions), log-uniform.
const PARTITION_SIZE: (f64, f64) = (100.0, 65_536.0);
/// Percentage of entries that carry a promoted index.
const PROMOTED_PERCENT: u64 = 5;
const PROMOTED_LEN: (u64, u64) = (50, 500);
const SEED: u64 = 0x00C1_EA7E_1DE8_0001;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct GeneratedIndex {
    pub entries: u64,
    pub bytes: u64,
    pub promoted_entries: u64,
    /// Data.db length the positions describe.
    pub data_length: u64,
}

/// Writes a synthetic Index.db with `entries` entries to `path` (deterministic for a
/// given `seed`): keys of 8..=40 random bytes, positions increasing by log-uniform
/// partition sizes of 100 B..64 KiB, 5% of entries with a 50..=500 byte promoted index.
pub fn generate_index(path: &Path, entries: u64, seed: u64) -> Result<GeneratedIndex> {
    let f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = IndexWriter::new(BufWriter::with_capacity(1 << 20, f), 0);
    let mut rng = SplitMix64::new(seed);
    let mut key = [0u8; KEY_LEN.1 as usize];
    let mut promoted = vec![0u8; PROMOTED_LEN.1 as usize];
    let (ln_lo, ln_hi) = (PARTITION_SIZE.0.ln(), PARTITION_SIZE.1.ln());
    let mut position = 0u64;
    let mut promoted_entries = 0;
    for _ in 0..entries {
        let k = &mut key[..rng.range(KEY_LEN.0, KEY_LEN.1) as usize];
        rng.fill(k);
        let p = if rng.range(0, 99) < PROMOTED_PERCENT {
            promoted_entries += 1;
            let p = &mut promoted[..rng.range(PROMOTED_LEN.0, PROMOTED_LEN.1) as usize];
            rng.fill(p);
            &p[..]
        } else {
            &[][..]
        };
        w.append(k, position, p)
            .with_context(|| format!("writing {}", path.display()))?;
        position += (ln_lo + rng.unit() * (ln_hi - ln_lo)).exp() as u64;
    }
    let bytes = w.len();
    let out = w
        .finish()
        .with_context(|| format!("writing {}", path.display()))?;
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(GeneratedIndex {
        entries,
        bytes,
        promoted_entries,
        data_length: position,
    })
}

/// One full pass of IndexReader over a file.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IndexPass {
    pub wall_s: f64,
    pub mb_per_s: f64,
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    /// Growth of the peak RSS (VmHWM) over the pass, from the RSS at its start.
    pub peak_rss_delta_bytes: u64,
    /// Peak RSS of the whole process during the pass.
    pub peak_rss_bytes: u64,
    /// Bytes fetched from storage during the pass (0 when the page cache is warm), if
    /// /proc/self/io is readable.
    pub storage_read_bytes: Option<u64>,
    pub entries: u64,
    /// Sum of positions, key lengths and promoted index lengths: keeps the work observable.
    pub checksum: u64,
}

/// Streams the whole of `path` with [`IndexReader`], measuring time, CPU and peak RSS.
pub fn index_pass(path: &Path, file_bytes: u64) -> Result<IndexPass> {
    // Without the trim, the previous pass's freed buffer would still be resident and this
    // pass's peak RSS delta would read 0.
    proc::trim_heap();
    proc::reset_peak_rss()
        .context("resetting the peak RSS (writing 5 to /proc/self/clear_refs needs Linux 4.0+)")?;
    let rss_start = proc::peak_rss().context("reading VmHWM from /proc/self/status")?;
    let io_start = proc::io_counters().ok();
    let cpu_start = proc::cpu_time().context("getrusage")?;
    let t0 = Instant::now();

    let mut reader = IndexReader::open(path)?;
    let mut entries = 0u64;
    let mut checksum = 0u64;
    while let Some(e) = reader.next_entry()? {
        entries += 1;
        checksum = checksum
            .wrapping_add(e.position)
            .wrapping_add(e.key.len() as u64)
            .wrapping_add(e.promoted_index.len() as u64);
    }
    let checksum = black_box(checksum);

    let wall = t0.elapsed();
    let cpu = proc::cpu_time().context("getrusage")?.since(&cpu_start);
    let peak = proc::peak_rss().context("reading VmHWM from /proc/self/status")?;
    let io = match (io_start, proc::io_counters().ok()) {
        (Some(a), Some(b)) => Some(b.since(&a).read_bytes),
        _ => None,
    };
    drop(reader);
    Ok(IndexPass {
        wall_s: secs(wall),
        mb_per_s: mb(file_bytes as f64) / secs(wall),
        cpu_user_s: secs(cpu.user),
        cpu_system_s: secs(cpu.system),
        peak_rss_delta_bytes: peak.saturating_sub(rss_start),
        peak_rss_bytes: peak,
        storage_read_bytes: io,
        entries,
        checksum,
    })
}

#[derive(Serialize)]
struct IndexSize {
    generated: GeneratedIndex,
    wall_s: Stat,
    mb_per_s: Stat,
    cpu_s: Stat,
    peak_rss_delta_bytes: Stat,
    peak_rss_bytes: Stat,
    passes: Vec<IndexPass>,
}

#[derive(Serialize)]
struct IndexReport {
    benchmark: &'static str,
    iterations: u32,
    page_cache: &'static str,
    threads: u32,
    sizes: Vec<IndexSize>,
    /// Median peak RSS delta of the largest entry count over that of the smallest.
    rss_delta_ratio_largest_to_smallest: Option<f64>,
    /// The same for the whole process's peak RSS.
    peak_rss_ratio_largest_to_smallest: Option<f64>,
    entries_ratio_largest_to_smallest: f64,
}

fn run_index(a: IndexBenchArgs) -> Result<ExitCode> {
    let scratch = ScratchDir::new(a.common.dir.as_deref())?;
    let mut sizes = Vec::new();
    for &n in &a.entries {
        let path = scratch.path().join(format!("bench-{n}-big-Index.db"));
        eprintln!("generating {} with {n} entries", path.display());
        let generated = generate_index(&path, n, SEED)?;
        let mut passes = Vec::new();
        for i in 0..a.common.iterations {
            let p = index_pass(&path, generated.bytes)?;
            if p.entries != n {
                bail!(
                    "read {} entries from {}, wrote {n}",
                    p.entries,
                    path.display()
                );
            }
            eprintln!(
                "  pass {}/{}: {:.3} s, {:.0} MB/s, peak RSS +{:.0} KiB",
                i + 1,
                a.common.iterations,
                p.wall_s,
                p.mb_per_s,
                kib(p.peak_rss_delta_bytes as f64)
            );
            passes.push(p);
        }
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        let stat = |f: fn(&IndexPass) -> f64| Stat::of(&passes.iter().map(f).collect::<Vec<_>>());
        sizes.push(IndexSize {
            generated,
            wall_s: stat(|p| p.wall_s),
            mb_per_s: stat(|p| p.mb_per_s),
            cpu_s: stat(|p| p.cpu_user_s + p.cpu_system_s),
            peak_rss_delta_bytes: stat(|p| p.peak_rss_delta_bytes as f64),
            peak_rss_bytes: stat(|p| p.peak_rss_bytes as f64),
            passes,
        });
    }
    drop(scratch);

    let smallest = sizes.iter().min_by_key(|s| s.generated.entries);
    let largest = sizes.iter().max_by_key(|s| s.generated.entries);
    let ratio = |f: fn(&IndexSize) -> f64| match (smallest, largest) {
        (Some(s), Some(l)) if f(s) > 0.0 => Some(f(l) / f(s)),
        _ => None,
    };
    let rss_ratio = ratio(|s| s.peak_rss_delta_bytes.median);
    let peak_ratio = ratio(|s| s.peak_rss_bytes.median);
    let entries_ratio = ratio(|s| s.generated.entries as f64).unwrap_or(1.0);
    let report = IndexReport {
        benchmark: "index",
        iterations: a.common.iterations,
        page_cache: "warm (the file was just written; the parser is CPU-bound)",
        threads: 1,
        sizes,
        rss_delta_ratio_largest_to_smallest: rss_ratio,
        peak_rss_ratio_largest_to_smallest: peak_ratio,
        entries_ratio_largest_to_smallest: entries_ratio,
    };
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_index(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_index(r: &IndexReport) {
    println!(
        "Index.db streaming: IndexReader::next_entry, 1 thread, page cache {}; {} iteration(s), median (min–max)",
        r.page_cache.split_whitespace().next().unwrap_or(""),
        r.iterations
    );
    let rows: Vec<[String; 7]> = r
        .sizes
        .iter()
        .map(|s| {
            [
                s.generated.entries.to_string(),
                format!("{:.1} MB", mb(s.generated.bytes as f64)),
                s.wall_s.show(|v| format!("{:.1}", v * 1e3)) + " ms",
                s.mb_per_s.show(|v| format!("{v:.0}")),
                format!("{:.1} ms", s.cpu_s.median * 1e3),
                s.peak_rss_delta_bytes.show(|v| format!("{:.0}", kib(v))) + " KiB",
                format!("{:.0} KiB", kib(s.peak_rss_bytes.median)),
            ]
        })
        .collect();
    let header = [
        "entries",
        "Index.db",
        "wall",
        "MB/s",
        "CPU user+sys",
        "peak RSS delta",
        "peak RSS",
    ];
    let width: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        println!("  {}", parts.join("  "));
    };
    line(&header);
    for row in &rows {
        line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let show = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:.2}"));
    println!(
        "largest/smallest entry count ({:.0}x entries): peak RSS delta ratio {}, peak RSS ratio {}",
        r.entries_ratio_largest_to_smallest,
        show(r.rss_delta_ratio_largest_to_smallest),
        show(r.peak_rss_ratio_largest_to_smallest),
    );
    let storage: u64 = r
        .sizes
        .iter()
        .flat_map(|s| &s.passes)
        .filter_map(|p| p.storage_read_bytes)
        .sum();
    println!("storage reads during passes: {storage} B (MB = 10^6 bytes)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_median_and_range() {
        assert_eq!(
            Stat::of(&[3.0, 1.0, 2.0]),
            Stat {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
        assert_eq!(Stat::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert_eq!(Stat::of(&[5.0]).median, 5.0);
    }

    #[test]
    fn generated_index_is_deterministic_and_readable() {
        let dir = ScratchDir::new(None).unwrap();
        let a = dir.path().join("a-Index.db");
        let b = dir.path().join("b-Index.db");
        let ga = generate_index(&a, 2000, 7).unwrap();
        let gb = generate_index(&b, 2000, 7).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert_eq!(ga.bytes, std::fs::metadata(&a).unwrap().len());
        // About 5% promoted.
        assert!((40..=160).contains(&ga.promoted_entries), "{ga:?}");
        let mut r = IndexReader::open(&a)
            .unwrap()
            .with_data_length(gb.data_length);
        let mut n = 0;
        let mut last = None;
        while let Some(e) = r.next_entry().unwrap() {
            assert!((8..=40).contains(&e.key.len()));
            assert!(e.promoted_index.is_empty() || (50..=500).contains(&e.promoted_index.len()));
            if let Some(l) = last {
                assert!((100..=65_536).contains(&(e.position - l)));
            }
            last = Some(e.position);
            n += 1;
        }
        assert_eq!(n, 2000);
    }
}

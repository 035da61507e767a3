//! `cleave bench index`: streams a synthetic Index.db with [`IndexReader`] and measures
//! throughput, CPU and the growth of the peak RSS per entry count (issue 2: O(1) memory in
//! the entry count, >= 200 MB/s on one core). The page cache is warm on purpose: the parser
//! is CPU-bound. Measurement helpers (peak RSS, CPU time, I/O counters) are in
//! `crate::io::proc`.

use std::fs::File;
use std::hint::black_box;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::{ScratchDir, SplitMix64, Stat};
use crate::io::proc;
use crate::sstable::index::{IndexReader, IndexWriter};

fn mb(bytes: f64) -> f64 {
    bytes / 1e6
}

fn kib(bytes: f64) -> f64 {
    bytes / 1024.0
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// What `cleave bench index` was asked to measure.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Entry counts to generate and stream.
    pub entries: Vec<u64>,
    pub iterations: u32,
    /// Parent of the scratch directory (default: the system temporary directory).
    pub dir: Option<PathBuf>,
}

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
pub struct IndexSize {
    generated: GeneratedIndex,
    wall_s: Stat,
    mb_per_s: Stat,
    cpu_s: Stat,
    peak_rss_delta_bytes: Stat,
    peak_rss_bytes: Stat,
    passes: Vec<IndexPass>,
}

#[derive(Serialize)]
pub struct IndexReport {
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

/// Generates and streams an Index.db of each entry count, `iterations` passes each.
pub fn run(a: &IndexOptions) -> Result<IndexReport> {
    let scratch = ScratchDir::new(a.dir.as_deref())?;
    let mut sizes = Vec::new();
    for &n in &a.entries {
        let path = scratch.path().join(format!("bench-{n}-big-Index.db"));
        eprintln!("generating {} with {n} entries", path.display());
        let generated = generate_index(&path, n, SEED)?;
        let mut passes = Vec::new();
        for i in 0..a.iterations {
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
                a.iterations,
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
        iterations: a.iterations,
        page_cache: "warm (the file was just written; the parser is CPU-bound)",
        threads: 1,
        sizes,
        rss_delta_ratio_largest_to_smallest: rss_ratio,
        peak_rss_ratio_largest_to_smallest: peak_ratio,
        entries_ratio_largest_to_smallest: entries_ratio,
    };
    Ok(report)
}

/// The human-readable table of a report.
pub fn render(r: &IndexReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Index.db streaming: IndexReader::next_entry, 1 thread, page cache {}; {} iteration(s), median (min–max)\n",
        r.page_cache.split_whitespace().next().unwrap_or(""),
        r.iterations
    ));
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
    let line = |out: &mut String, cells: &[&str]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        out.push_str(&format!("  {}\n", parts.join("  ")));
    };
    line(&mut out, &header);
    for row in &rows {
        line(
            &mut out,
            &row.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
    let show = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:.2}"));
    out.push_str(&format!(
        "largest/smallest entry count ({:.0}x entries): peak RSS delta ratio {}, peak RSS ratio {}\n",
        r.entries_ratio_largest_to_smallest,
        show(r.rss_delta_ratio_largest_to_smallest),
        show(r.peak_rss_ratio_largest_to_smallest),
    ));
    let storage: u64 = r
        .sizes
        .iter()
        .flat_map(|s| &s.passes)
        .filter_map(|p| p.storage_read_bytes)
        .sum();
    out.push_str(&format!(
        "storage reads during passes: {storage} B (MB = 10^6 bytes)\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

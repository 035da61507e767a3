//! How long making a split's children durable takes, by strategy: the files of an 8-way
//! split (8 children × 8 components, each a few KiB to a few MiB, as the rebuilt components
//! are) written into a fresh directory, then made durable by
//! - `serial`: fsync one after another (what the split did before issue 8),
//! - `pool-N`: fsync on N threads (`io::durable`, what it does now),
//! - `fdatasync-pool-N`: fdatasync on N threads,
//! - `syncfs`: one syncfs(2) of the filesystem,
//!
//! each followed by an fsync of the directory. Every strategy gets fresh files (the page
//! cache is dirty the same way each time); iterations alternate strategies so that drift
//! in the machine's load hits them all.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::io::durable::{self, Sync};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Strategy {
    Serial,
    Pool(usize),
    DataPool(usize),
    Syncfs,
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Strategy::Serial => write!(f, "serial fsync"),
            Strategy::Pool(n) => write!(f, "fsync, pool of {n}"),
            Strategy::DataPool(n) => write!(f, "fdatasync, pool of {n}"),
            Strategy::Syncfs => write!(f, "syncfs"),
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Measured {
    pub strategy: String,
    pub files: usize,
    pub bytes: u64,
    /// Seconds per iteration, sorted.
    pub seconds: Vec<f64>,
    pub median: f64,
}

/// Sizes of one child's rebuilt files (Index, CompressionInfo, Summary, Filter,
/// Statistics, Digest, TOC, and a Data.db's re-encoded ends), scaled by `scale`.
fn child_sizes(scale: u64) -> [u64; 8] {
    [
        2 << 20,
        256 << 10,
        64 << 10,
        128 << 10,
        16 << 10,
        16,
        128,
        32 << 10,
    ]
    .map(|b| (b * scale).max(1))
}

fn write_files(
    dir: &Path,
    children: usize,
    scale: u64,
) -> std::io::Result<Vec<(PathBuf, File, bool)>> {
    let mut v = Vec::new();
    let buf = vec![0x5au8; (2 << 20) * scale as usize];
    for c in 0..children {
        for (i, n) in child_sizes(scale).iter().enumerate() {
            let p = dir.join(format!("c{c}-f{i}"));
            let mut f = File::create(&p)?;
            f.write_all(&buf[..*n as usize])?;
            v.push((p, f, false));
        }
    }
    Ok(v)
}

fn once(
    dir: &Path,
    s: Strategy,
    children: usize,
    scale: u64,
) -> std::io::Result<(usize, u64, f64)> {
    let d = dir.join(format!("run-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir(&d)?;
    let files = write_files(&d, children, scale)?;
    let bytes: u64 = files
        .iter()
        .map(|(_, f, _)| f.metadata().map_or(0, |m| m.len()))
        .sum();
    let started = Instant::now();
    let r = match s {
        Strategy::Serial => durable::sync_parallel(&files, 1, Sync::All),
        Strategy::Pool(n) => durable::sync_parallel(&files, n, Sync::All),
        Strategy::DataPool(n) => durable::sync_parallel(&files, n, Sync::Data),
        Strategy::Syncfs => durable::syncfs(&d).map_err(|source| durable::BatchError {
            path: d.clone(),
            source,
        }),
    };
    r.map_err(|e| e.source)?;
    File::open(&d)?.sync_all()?;
    let secs = started.elapsed().as_secs_f64();
    let n = files.len();
    drop(files);
    std::fs::remove_dir_all(&d)?;
    Ok((n, bytes, secs))
}

/// Runs every strategy `iterations` times in `dir`.
pub fn run(
    dir: &Path,
    children: usize,
    scale: u64,
    iterations: u32,
) -> std::io::Result<Vec<Measured>> {
    let strategies = [
        Strategy::Serial,
        Strategy::Pool(2),
        Strategy::Pool(4),
        Strategy::Pool(8),
        Strategy::DataPool(4),
        Strategy::Syncfs,
    ];
    let mut out: Vec<Measured> = strategies
        .iter()
        .map(|s| Measured {
            strategy: s.to_string(),
            files: 0,
            bytes: 0,
            seconds: Vec::new(),
            median: 0.0,
        })
        .collect();
    for _ in 0..iterations {
        for (i, s) in strategies.iter().enumerate() {
            let (n, b, secs) = once(dir, *s, children, scale)?;
            out[i].files = n;
            out[i].bytes = b;
            out[i].seconds.push(secs);
        }
    }
    for m in &mut out {
        m.seconds.sort_by(f64::total_cmp);
        m.median = m.seconds.get(m.seconds.len() / 2).copied().unwrap_or(0.0);
    }
    Ok(out)
}

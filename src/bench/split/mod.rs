//! `cleave bench split`: the CASSANDRA-21550 table on this machine (issues 4 and 8).
//!
//! For each parent size a fresh XFS (reflink=1) loop mount is made on a sparse image under
//! the scratch directory; `cleave gen` writes the parent into it, a copy of the parent goes
//! to the plain disk (for `copy` there), and every configuration runs `iterations` times,
//! iteration by iteration so that a slow patch of the shared machine hits all of them.
//!
//! * [`fixture`]: one generated parent, its loop mount and its runs;
//! * [`measure`]: one cold or warm run of one configuration, measured from outside (the
//!   syscalls are in `crate::io::{child, cache}`);
//! * [`report`]: medians, targets, the markdown tables, CSV and JSON; [`plot`] the SVG.
//!
//! Everything created (mounts, images, parents, children) is removed by guards, also when a
//! run fails.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::ScratchDir;
use crate::io::loopfs;

pub(crate) mod fixture;
pub(crate) mod measure;
mod plot;
mod report;

pub use report::Output;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// What `cleave bench split` was asked to measure (the CLI's flags, parsed).
#[derive(Debug, Clone)]
pub struct SplitBenchOptions {
    /// Parent sizes (uncompressed Data.db bytes, `cleave gen --size`).
    pub sizes: Vec<u64>,
    /// Children per split.
    pub parts: usize,
    pub partition_size: u64,
    pub row_size: u64,
    /// LZ4 chunk length of the parent.
    pub chunk: u64,
    /// BIG version of the parent.
    pub version: String,
    /// Partition size of the extra `aligned, no digest` parent (same bytes, fewer
    /// partitions: what separates the per-partition from the per-chunk cost); 0 skips it.
    pub wide_partition_size: u64,
    /// Size of that parent (default: the largest of `sizes`).
    pub wide_size: Option<u64>,
    /// Size of the incompressible (`gen --random`) parent (default: the largest of
    /// `sizes`); 0 skips it.
    pub random_size: Option<u64>,
    /// Extra splits of the incompressible parent at seeded random token cuts (`parts - 1`
    /// tokens each), so that the fallback count covers more than one cut set.
    pub random_cut_sets: u32,
    /// Only these configurations ([`Config::key`]); `None` runs all of them.
    pub configs: Option<Vec<String>>,
    /// Another cleave binary (e.g. main's engine): every `aligned, no digest` run of a
    /// compressible parent is repeated with it, side by side.
    pub baseline_exe: Option<PathBuf>,
    /// Skip the warm-cache digest runs at the largest size and the readahead-0 `combine`
    /// runs at the smallest.
    pub no_warm: bool,
    /// Write split.csv, split.json, split.svg and split.md here.
    pub report_dir: Option<PathBuf>,
    pub iterations: u32,
    /// Parent of the scratch directory (default: the system temporary directory).
    pub dir: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------
// Configurations

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fs {
    /// The XFS reflink=1 loop mount.
    Xfs,
    /// The plain disk the scratch directory is on.
    Plain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Split {
        layout: &'static str,
        digest: &'static str,
        /// `--tokens` at seeded random cuts (the iteration is the seed) instead of
        /// `--parts`.
        random_cuts: bool,
        /// Run by [`SplitBenchOptions::baseline_exe`] instead of this binary.
        baseline: bool,
        /// `--target-cassandra` of the split; `None` leaves the split's default (`unknown`:
        /// children a 5.0.5+ node reads, filler partitions instead of a dead prefix).
        target_cassandra: Option<&'static str>,
    },
    /// `cp --reflink=never` (coreutils 9 reflinks by default on XFS).
    Cp,
    CpReflink,
}

#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// What `--configs` selects it by.
    pub key: &'static str,
    /// What the tables call it.
    pub name: &'static str,
    pub tool: Tool,
    pub fs: Fs,
}

const fn split(
    key: &'static str,
    name: &'static str,
    layout: &'static str,
    digest: &'static str,
    fs: Fs,
) -> Config {
    Config {
        key,
        name,
        tool: Tool::Split {
            layout,
            digest,
            random_cuts: false,
            baseline: false,
            target_cassandra: None,
        },
        fs,
    }
}

pub const REGRID: Config = split("regrid", "regrid", "regrid", "off", Fs::Xfs);
pub const COPY: Config = split("copy", "copy", "copy", "off", Fs::Xfs);
pub const COPY_PLAIN: Config = split("copy-plain", "copy (plain disk)", "copy", "off", Fs::Plain);
pub const DIGEST_FULL: Config = split(
    "digest-full",
    "aligned + digest full",
    "aligned",
    "full",
    Fs::Xfs,
);
pub const DIGEST_COMBINE: Config = split(
    "digest-combine",
    "aligned + digest combine",
    "aligned",
    "combine",
    Fs::Xfs,
);
pub const ALIGNED: Config = split("aligned", "aligned, no digest", "aligned", "off", Fs::Xfs);
/// `aligned, no digest` for an explicit pre-5.0.5 target (`--target-cassandra 4.1`): a
/// child may start with a dead prefix (the bytes of the boundary chunk before its first
/// partition), which Cassandra 4.1 skips through Index.db and 5.0.5+ would scan linearly
/// (docs/compatibility.md, issue 16). `aligned` itself keeps the split's default target,
/// so this row is the before of the 5.0.5+ layout's filler partitions (issue 21,
/// deliverable 4). Run only when `--configs` names it.
pub const ALIGNED_41: Config = Config {
    key: "aligned-4.1",
    name: "aligned, no digest, target 4.1",
    tool: Tool::Split {
        layout: "aligned",
        digest: "off",
        random_cuts: false,
        baseline: false,
        target_cassandra: Some("4.1"),
    },
    fs: Fs::Xfs,
};
pub const PADDED: Config = split("padded", "padded, no digest", "padded", "off", Fs::Xfs);
pub const CP: Config = Config {
    key: "cp",
    name: "cp --reflink=never",
    tool: Tool::Cp,
    fs: Fs::Xfs,
};
pub const CP_REFLINK: Config = Config {
    key: "cp-reflink",
    name: "cp --reflink=always",
    tool: Tool::CpReflink,
    fs: Fs::Xfs,
};
/// `aligned, no digest` at seeded random token cuts (the incompressible parent).
pub const ALIGNED_RANDOM_CUTS: Config = Config {
    key: "aligned",
    name: "aligned, no digest, random token cuts",
    tool: Tool::Split {
        layout: "aligned",
        digest: "off",
        random_cuts: true,
        baseline: false,
        target_cassandra: None,
    },
    fs: Fs::Xfs,
};
/// `aligned, no digest` by another build of cleave (`--baseline-exe`), on the same parents
/// in the same run: a before/after of the engine that shares every fixture and every
/// patch of machine load.
pub const ALIGNED_BASELINE: Config = Config {
    key: "aligned",
    name: "aligned, no digest (baseline binary)",
    tool: Tool::Split {
        layout: "aligned",
        digest: "off",
        random_cuts: false,
        baseline: true,
        target_cassandra: None,
    },
    fs: Fs::Xfs,
};

/// `regrid` by another build of cleave (`--baseline-exe`): issue 16's before/after of the
/// re-encode (main's single-threaded one against this binary's), same parents, same run.
pub const REGRID_BASELINE: Config = Config {
    key: "regrid",
    name: "regrid (baseline binary)",
    tool: Tool::Split {
        layout: "regrid",
        digest: "off",
        random_cuts: false,
        baseline: true,
        target_cassandra: None,
    },
    fs: Fs::Xfs,
};

/// The table's rows, in the reference's order (slowest first).
pub const MAIN: [Config; 10] = [
    REGRID,
    COPY,
    COPY_PLAIN,
    DIGEST_FULL,
    DIGEST_COMBINE,
    ALIGNED,
    ALIGNED_41,
    PADDED,
    CP,
    CP_REFLINK,
];
pub const WARM: [Config; 3] = [DIGEST_FULL, DIGEST_COMBINE, ALIGNED];
/// `combine` with the loop device's readahead set to 0: what it reads when only the pages
/// holding CRC trailers are fetched.
pub const COMBINE_RA0: Config = split(
    "digest-combine",
    "aligned + digest combine, device readahead 0",
    "aligned",
    "combine",
    Fs::Xfs,
);

/// The keys `--configs` accepts.
pub fn config_keys() -> Vec<&'static str> {
    MAIN.iter().map(|c| c.key).collect()
}

/// Rows of [`MAIN`] a sweep without `--configs` leaves out (so that the default sweep runs
/// what it ran before they were added).
const OPT_IN: [&str; 1] = [ALIGNED_41.key];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Content {
    Compressible,
    Random,
}

/// One generated parent and the configurations run on it.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub size: u64,
    pub partition_size: u64,
    pub content: Content,
    pub configs: Vec<Config>,
    pub warm: Vec<Config>,
    /// Cold runs with the loop device's readahead at 0.
    pub no_readahead: Vec<Config>,
    /// Cold runs of [`ALIGNED_RANDOM_CUTS`], one per cut set.
    pub cut_sets: u32,
    /// What the fixture is for, in progress lines.
    pub role: &'static str,
}

impl Fixture {
    fn needs_plain_copy(&self) -> bool {
        self.configs.iter().any(|c| c.fs == Fs::Plain)
    }
}

/// Progress lines on stderr, stamped with the time since the start.
pub struct Progress {
    t0: Instant,
}

impl Progress {
    pub fn new() -> Progress {
        Progress { t0: Instant::now() }
    }

    pub fn say(&self, msg: impl std::fmt::Display) {
        let s = self.t0.elapsed().as_secs();
        eprintln!("[{:>3}:{:02}] {msg}", s / 60, s % 60);
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

/// The fixtures a sweep runs: every size with the selected configurations, then the wide
/// partitions and the incompressible parent.
fn fixtures(a: &SplitBenchOptions, sizes: &[u64]) -> Result<Vec<Fixture>> {
    let selected = |c: &Config| {
        a.configs.as_ref().map_or_else(
            || !OPT_IN.contains(&c.key),
            |k| k.iter().any(|k| k == c.key),
        )
    };
    if let Some(keys) = &a.configs {
        if let Some(bad) = keys.iter().find(|k| !config_keys().contains(&k.as_str())) {
            bail!(
                "--configs: unknown configuration {bad:?} (one of {})",
                config_keys().join(", ")
            );
        }
    }
    let largest = *sizes.last().context("no sizes")?;
    let smallest = sizes[0];
    let with_baseline = |mut v: Vec<Config>| {
        if a.baseline_exe.is_some() {
            if let Some(i) = v.iter().position(|c| c.name == ALIGNED.name) {
                v.insert(i + 1, ALIGNED_BASELINE);
            }
            if let Some(i) = v.iter().position(|c| c.name == REGRID.name) {
                v.insert(i + 1, REGRID_BASELINE);
            }
        }
        v
    };
    let mut v: Vec<Fixture> = sizes
        .iter()
        .map(|&size| Fixture {
            size,
            partition_size: a.partition_size,
            content: Content::Compressible,
            configs: with_baseline(MAIN.iter().copied().filter(selected).collect()),
            warm: if size == largest && !a.no_warm {
                WARM.iter().copied().filter(selected).collect()
            } else {
                Vec::new()
            },
            no_readahead: if size == smallest && !a.no_warm {
                [COMBINE_RA0].into_iter().filter(selected).collect()
            } else {
                Vec::new()
            },
            cut_sets: 0,
            role: "sweep",
        })
        .collect();
    if a.wide_partition_size > 0 && a.wide_partition_size != a.partition_size {
        v.push(Fixture {
            size: a.wide_size.unwrap_or(largest),
            partition_size: a.wide_partition_size,
            content: Content::Compressible,
            configs: with_baseline(vec![ALIGNED]),
            warm: Vec::new(),
            no_readahead: Vec::new(),
            cut_sets: 0,
            role: "wide partitions",
        });
    }
    let random_size = a.random_size.unwrap_or(largest);
    if random_size > 0 {
        v.push(Fixture {
            size: random_size,
            partition_size: a.partition_size,
            content: Content::Random,
            configs: with_baseline(vec![ALIGNED]),
            warm: Vec::new(),
            no_readahead: Vec::new(),
            cut_sets: a.random_cut_sets,
            role: "incompressible",
        });
    }
    Ok(v)
}

/// Runs the sweep, writes the report files (with `report_dir`) and returns the report.
pub fn run(a: &SplitBenchOptions) -> Result<Output> {
    let progress = Progress::new();
    if let Some(why) = loopfs::unavailable_reason() {
        bail!("cleave bench split needs an XFS loop mount: {why}");
    }
    if a.sizes.is_empty() || a.sizes.contains(&0) {
        bail!("--sizes: expected positive sizes");
    }
    let exe = std::env::current_exe().context("locating the cleave binary")?;
    let mut sizes = a.sizes.clone();
    sizes.sort();
    sizes.dedup();
    let largest = *sizes.last().context("no sizes")?;
    let fixtures = fixtures(a, &sizes)?;

    let scratch = ScratchDir::new(a.dir.as_deref())?;
    progress.say(format_args!(
        "scratch {} ({} fixtures, {} iteration(s))",
        scratch.path().display(),
        fixtures.len(),
        a.iterations
    ));
    let load_start = report::loadavg();
    let mut parents = Vec::new();
    let mut runs = Vec::new();
    let mut loop_dio = false;
    for fx in &fixtures {
        let r = fixture::run_fixture(a, &exe, scratch.path(), fx, &progress, &mut loop_dio)?;
        parents.push(r.info);
        runs.extend(r.runs);
    }
    let env = report::environment(scratch.path(), loop_dio, &load_start);
    drop(scratch);
    let out = report::emit(a, &parents, &runs, env, largest)?;
    if let Some(dir) = &a.report_dir {
        progress.say(format_args!(
            "wrote split.csv, split.json, split.md, split.svg in {}",
            dir.display()
        ));
    }
    progress.say("done");
    Ok(out)
}

/// Measures nothing: recomputes the tables, targets and plot from a previous run's
/// split.json (with `report_dir`, rewrites its files).
pub fn from_json(a: &SplitBenchOptions, path: &std::path::Path) -> Result<Output> {
    report::from_json(a, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(configs: Option<&[&str]>) -> SplitBenchOptions {
        SplitBenchOptions {
            sizes: vec![8 * GIB],
            parts: 8,
            partition_size: 64 << 10,
            row_size: 4 << 10,
            chunk: 16 << 10,
            version: "nb".into(),
            wide_partition_size: 0,
            wide_size: None,
            random_size: Some(0),
            random_cut_sets: 0,
            configs: configs.map(|c| c.iter().map(|k| k.to_string()).collect()),
            baseline_exe: None,
            no_warm: true,
            report_dir: None,
            iterations: 1,
            dir: None,
        }
    }

    fn names(a: &SplitBenchOptions) -> Vec<&'static str> {
        fixtures(a, &a.sizes).expect("fixtures")[0]
            .configs
            .iter()
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn aligned_4_1_runs_only_when_named() {
        // Without --configs the sweep runs what it ran before the key existed.
        let all = names(&options(None));
        assert!(!all.contains(&ALIGNED_41.name), "{all:?}");
        assert_eq!(all.len(), MAIN.len() - 1);
        assert!(config_keys().contains(&"aligned-4.1"));
        let some = names(&options(Some(&[
            "aligned",
            "aligned-4.1",
            "cp",
            "cp-reflink",
        ])));
        assert_eq!(
            some,
            [ALIGNED.name, ALIGNED_41.name, CP.name, CP_REFLINK.name]
        );
        assert!(fixtures(&options(Some(&["aligned-4.2"])), &[8 * GIB]).is_err());
    }
}

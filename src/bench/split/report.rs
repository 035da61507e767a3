//! The report of a sweep: medians and ranges by (parent, configuration, cache), the targets
//! of issues 4 and 8 with their margins, the markdown tables of docs/benchmarks.md, CSV,
//! JSON (every run, raw, so that `--from-json` can redraw everything) and the SVG plot.

use std::path::Path;
use std::process::Command;

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fixture::ParentInfo;
use super::measure::Run;
use super::{
    Content, Fs, SplitBenchOptions, ALIGNED, ALIGNED_BASELINE, COMBINE_RA0, CP, CP_REFLINK,
    DIGEST_COMBINE, GIB, MAIN, MIB, REGRID, WARM,
};
use crate::bench::Stat;
use crate::io::proc;

pub fn human(b: f64) -> String {
    let a = b.abs();
    if a >= GIB as f64 {
        format!("{:.2} GiB", b / GIB as f64)
    } else if a >= MIB as f64 {
        format!("{:.1} MiB", b / MIB as f64)
    } else if a >= 1024.0 {
        format!("{:.0} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

pub fn size_label(b: u64) -> String {
    if b.is_multiple_of(GIB) {
        format!("{} GiB", b / GIB)
    } else if b.is_multiple_of(MIB) {
        format!("{} MiB", b / MIB)
    } else if b.is_multiple_of(1024) {
        format!("{} KiB", b / 1024)
    } else {
        format!("{b} B")
    }
}

pub fn run_line(r: &Run) -> String {
    format!(
        "wall {:.2} s (sync {:.2}), CPU {:.2} s, read {}, written {}, RSS {}, shared {} copied {} re-encoded {}{}{}{}{}",
        r.wall_s,
        r.sync_s,
        r.cpu_s(),
        human(r.read_bytes as f64),
        human(r.write_bytes as f64),
        human(r.peak_rss_bytes as f64),
        r.bytes_shared.map_or("-".into(), |b| human(b as f64)),
        r.bytes_copied.map_or("-".into(), |b| human(b as f64)),
        r.bytes_reencoded.map_or("-".into(), |b| human(b as f64)),
        match r.children_fallback {
            Some(n) if n > 0 => format!(", {n} of {} children fell back", r.children),
            _ => String::new(),
        },
        match r.check_ok {
            Some(true) => ", check ok",
            Some(false) => ", check MISMATCH",
            None => "",
        },
        r.load1.map_or(String::new(), |l| format!(", load {l:.1}")),
        if r.cache == "cold" {
            format!(
                ", parent resident {} (Cached {} -> {})",
                human(r.cache_check.parent_resident_bytes as f64),
                human(r.cache_check.cached_before_bytes as f64),
                human(r.cache_check.cached_after_bytes as f64)
            )
        } else {
            format!(
                ", parent resident {}",
                human(r.cache_check.parent_resident_bytes as f64)
            )
        }
    )
}

// ---------------------------------------------------------------------------------------
// Aggregation

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub size_bytes: u64,
    pub partition_size: u64,
    pub content: Content,
    pub config: String,
    pub fs: Fs,
    pub cache: String,
    pub runs: usize,
    pub wall_s: Stat,
    pub process_wall_s: Stat,
    pub cpu_s: Stat,
    pub read_bytes: Stat,
    pub write_bytes: Stat,
    pub peak_rss_bytes: Stat,
    pub bytes_shared: Option<f64>,
    pub bytes_copied: Option<f64>,
    pub bytes_reencoded: Option<f64>,
    pub fiemap_shared_bytes: f64,
    pub space_used_bytes: f64,
    pub rebuilt_component_bytes: f64,
    pub children: usize,
    pub children_fallback: Option<usize>,
    /// Children and fallen-back children summed over the runs (cut sets differ by run).
    pub children_sum: usize,
    pub children_fallback_sum: usize,
    pub fallback_reasons: Vec<String>,
    /// 1-minute load average before the runs.
    pub load1: Option<Stat>,
    /// "ok" when every run's children matched the parent, "n/a" for cp.
    pub check: String,
    pub parent_resident_bytes_max: f64,
    /// Median CPU user+sys over the parent's partitions and over its chunks, in µs: the
    /// whole split (plan, write, check, publish) charged to each (splits only).
    pub cpu_us_per_partition: Option<f64>,
    pub cpu_us_per_chunk: Option<f64>,
    /// Flushes the loop device completed a run (`Run::device_flushes`) and the device of
    /// its image (`Run::backing_flushes`, shared with the machine).
    pub device_flushes: Option<Stat>,
    pub backing_flushes: Option<Stat>,
}

pub fn aggregate(runs: &[Run], parents: &[ParentInfo]) -> Vec<Row> {
    let mut groups: Vec<Vec<&Run>> = Vec::new();
    for r in runs {
        let same = |g: &Vec<&Run>| {
            let x = g[0];
            x.size_bytes == r.size_bytes
                && x.partition_size == r.partition_size
                && x.content == r.content
                && x.config == r.config
                && x.fs == r.fs
                && x.cache == r.cache
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
        .into_iter()
        .map(|g| {
            let stat =
                |f: &dyn Fn(&Run) -> f64| Stat::of(&g.iter().map(|r| f(r)).collect::<Vec<_>>());
            let opt = |f: &dyn Fn(&Run) -> Option<u64>| {
                let v: Vec<f64> = g.iter().filter_map(|r| f(r)).map(|x| x as f64).collect();
                (!v.is_empty()).then(|| Stat::of(&v).median)
            };
            let x = g[0];
            let parent = parents.iter().find(|p| {
                p.size_bytes == x.size_bytes
                    && p.partition_size == x.partition_size
                    && p.content == x.content
            });
            let cpu_s = stat(&|r| r.cpu_s());
            let split = g.iter().any(|r| r.check_ok.is_some());
            let per = |n: Option<u64>| {
                n.filter(|&n| split && n > 0)
                    .map(|n| cpu_s.median * 1e6 / n as f64)
            };
            let flushes = |f: &dyn Fn(&Run) -> Option<u64>| {
                let v: Vec<f64> = g.iter().filter_map(|r| f(r)).map(|x| x as f64).collect();
                (!v.is_empty()).then(|| Stat::of(&v))
            };
            let mut reasons: Vec<String> = Vec::new();
            for r in &g {
                for s in &r.fallback_reasons {
                    if !reasons.contains(s) {
                        reasons.push(s.clone());
                    }
                }
            }
            let check = if g.iter().all(|r| r.check_ok.is_none()) {
                "n/a".to_string()
            } else if g.iter().all(|r| r.check_ok == Some(true)) {
                "ok".to_string()
            } else {
                "MISMATCH".to_string()
            };
            Row {
                size_bytes: x.size_bytes,
                partition_size: x.partition_size,
                content: x.content,
                config: x.config.clone(),
                fs: x.fs,
                cache: x.cache.clone(),
                runs: g.len(),
                wall_s: stat(&|r| r.wall_s),
                process_wall_s: stat(&|r| r.process_wall_s),
                cpu_us_per_partition: per(parent.map(|p| p.partitions)),
                cpu_us_per_chunk: per(parent.map(|p| p.chunks)),
                device_flushes: flushes(&|r| r.device_flushes),
                backing_flushes: flushes(&|r| r.backing_flushes),
                cpu_s,
                read_bytes: stat(&|r| r.read_bytes as f64),
                write_bytes: stat(&|r| r.write_bytes as f64),
                peak_rss_bytes: stat(&|r| r.peak_rss_bytes as f64),
                bytes_shared: opt(&|r| r.bytes_shared),
                bytes_copied: opt(&|r| r.bytes_copied),
                bytes_reencoded: opt(&|r| r.bytes_reencoded),
                fiemap_shared_bytes: stat(&|r| r.fiemap_shared_bytes as f64).median,
                space_used_bytes: stat(&|r| r.space_used_bytes as f64).median,
                rebuilt_component_bytes: stat(&|r| r.rebuilt_component_bytes as f64).median,
                children: x.children,
                children_fallback: g.iter().filter_map(|r| r.children_fallback).max(),
                children_sum: g.iter().map(|r| r.children).sum(),
                children_fallback_sum: g.iter().filter_map(|r| r.children_fallback).sum(),
                fallback_reasons: reasons,
                load1: {
                    let v: Vec<f64> = g.iter().filter_map(|r| r.load1).collect();
                    (!v.is_empty()).then(|| Stat::of(&v))
                },
                check,
                parent_resident_bytes_max: g
                    .iter()
                    .map(|r| r.cache_check.parent_resident_bytes as f64)
                    .fold(0.0, f64::max),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Targets

#[derive(Debug, Clone, Serialize)]
struct Target {
    pub name: String,
    pub measured: String,
    pub limit: String,
    pub holds: Option<bool>,
    /// How far from the limit (a miss says by how much).
    pub margin: String,
}

fn ratio_target(name: &str, measured: f64, limit: f64, show: &dyn Fn(f64) -> String) -> Target {
    let holds = measured <= limit;
    Target {
        name: name.to_string(),
        measured: show(measured),
        limit: format!("≤ {}", show(limit)),
        holds: Some(holds),
        margin: if holds {
            format!("{:.2}× the limit", measured / limit)
        } else {
            format!(
                "missed by {} ({:.2}× the limit)",
                show(measured - limit),
                measured / limit
            )
        },
    }
}

fn speedup_target(name: &str, slow: f64, fast: f64, want: f64) -> Target {
    let got = slow / fast;
    let holds = got >= want;
    Target {
        name: name.to_string(),
        measured: format!("{got:.0}× ({slow:.2} s / {fast:.3} s)"),
        limit: format!("≥ {want:.0}×"),
        holds: Some(holds),
        margin: if holds {
            format!("{:.1}× above", got / want)
        } else {
            format!(
                "missed: {:.2}× of the target ({got:.0}× vs {want:.0}×)",
                got / want
            )
        },
    }
}

pub struct Report<'a> {
    pub parents: &'a [ParentInfo],
    pub runs: &'a [Run],
    pub rows: &'a [Row],
    pub largest: u64,
    pub a: &'a SplitBenchOptions,
}

impl Report<'_> {
    fn row(&self, size: u64, ps: u64, content: Content, config: &str, cache: &str) -> Option<&Row> {
        self.rows.iter().find(|r| {
            r.size_bytes == size
                && r.partition_size == ps
                && r.content == content
                && r.config == config
                && r.cache == cache
        })
    }

    fn main_row(&self, config: &str) -> Option<&Row> {
        self.row(
            self.largest,
            self.a.partition_size,
            Content::Compressible,
            config,
            "cold",
        )
    }

    fn parent(&self, size: u64, ps: u64, content: Content) -> Option<&ParentInfo> {
        self.parents
            .iter()
            .find(|p| p.size_bytes == size && p.partition_size == ps && p.content == content)
    }

    /// CPU seconds of `aligned, no digest` as fixed + b × partitions + c × chunks: the
    /// least-squares fit through every cold run of a compressible parent (every size, and
    /// the wide partitions, which separate the partition term from the chunk term).
    /// Returns the fit and the number of parents it went through.
    fn cpu_fit(&self, config: &str) -> Option<((f64, f64, f64), usize)> {
        let pts: Vec<[f64; 4]> = self
            .rows
            .iter()
            .filter(|r| {
                r.config == config && r.cache == "cold" && r.content == Content::Compressible
            })
            .filter_map(|r| {
                let p = self.parent(r.size_bytes, r.partition_size, r.content)?;
                Some([1.0, p.partitions as f64, p.chunks as f64, r.cpu_s.median])
            })
            .collect();
        if pts.len() < 3 {
            return None;
        }
        // Normal equations (XᵀX) β = Xᵀy, solved by Cramer's rule; column 3 is Xᵀy.
        let mut m = [[0.0f64; 4]; 3];
        for p in &pts {
            for (i, row) in m.iter_mut().enumerate() {
                for (j, cell) in row.iter_mut().enumerate() {
                    *cell += p[i] * p[j];
                }
            }
        }
        let det = |c: [usize; 3]| {
            let e = |i: usize, j: usize| m[i][c[j]];
            e(0, 0) * (e(1, 1) * e(2, 2) - e(1, 2) * e(2, 1))
                - e(0, 1) * (e(1, 0) * e(2, 2) - e(1, 2) * e(2, 0))
                + e(0, 2) * (e(1, 0) * e(2, 1) - e(1, 1) * e(2, 0))
        };
        let d = det([0, 1, 2]);
        // Relative test: the entries grow with the squared counts.
        if d.abs() <= 1e-12 * m[1][1] * m[2][2] {
            return None;
        }
        Some((
            (det([3, 1, 2]) / d, det([0, 3, 2]) / d, det([0, 1, 3]) / d),
            pts.len(),
        ))
    }

    /// The `aligned, no digest` rows of the sweep (64 KiB partitions), by size.
    fn aligned_by_size(&self, config: &str) -> Vec<&Row> {
        let mut v: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| {
                r.config == config
                    && r.cache == "cold"
                    && r.content == Content::Compressible
                    && r.partition_size == self.a.partition_size
            })
            .collect();
        v.sort_by_key(|r| r.size_bytes);
        v
    }

    fn targets(&self) -> Vec<Target> {
        let mut t = Vec::new();
        let a = self.a;
        let ps = a.partition_size;
        let hb = |b: f64| human(b);
        // Issue 8: at 8 GiB and at the largest size run.
        let mut speed_sizes = vec![self.largest];
        if self.largest != 8 * GIB
            && self
                .row(8 * GIB, ps, Content::Compressible, ALIGNED.name, "cold")
                .is_some()
        {
            speed_sizes.insert(0, 8 * GIB);
        }
        for &size in &speed_sizes {
            let Some(al) = self.row(size, ps, Content::Compressible, ALIGNED.name, "cold") else {
                continue;
            };
            if let Some(cp) = self.row(size, ps, Content::Compressible, CP.name, "cold") {
                t.push(speedup_target(
                    &format!(
                        "{}: aligned, no digest ≥ 100× faster than cp --reflink=never of the parent Data.db",
                        size_label(size)
                    ),
                    cp.wall_s.median,
                    al.wall_s.median,
                    100.0,
                ));
            }
            if let Some(rl) = self.row(size, ps, Content::Compressible, CP_REFLINK.name, "cold") {
                t.push(ratio_target(
                    &format!(
                        "{}: aligned, no digest wall ≤ 10 × cp --reflink=always of the file ({:.3} s)",
                        size_label(size),
                        rl.wall_s.median
                    ),
                    al.wall_s.median,
                    10.0 * rl.wall_s.median,
                    &|v| format!("{v:.3} s"),
                ));
            }
        }
        // Issue 21: the whole split's CPU charged to each partition, at 8 GiB and the largest.
        for &size in &speed_sizes {
            if let Some(us) = self
                .row(size, ps, Content::Compressible, ALIGNED.name, "cold")
                .and_then(|r| r.cpu_us_per_partition)
            {
                t.push(ratio_target(
                    &format!(
                        "{}: aligned, no digest CPU a partition, all-in (issue 21; the prototype: 0.89 µs)",
                        size_label(size)
                    ),
                    us,
                    0.5,
                    &|v| format!("{v:.3} µs"),
                ));
            }
        }
        if let Some(((_, per_partition, per_chunk), n)) = self.cpu_fit(ALIGNED.name) {
            let us = |v: f64| format!("{:.3} µs", v * 1e6);
            t.push(ratio_target(
                &format!("CPU a partition (least-squares fit through {n} parents)"),
                per_partition,
                0.3e-6,
                &us,
            ));
            t.push(ratio_target(
                &format!("CPU a chunk (least-squares fit through {n} parents)"),
                per_chunk,
                0.02e-6,
                &us,
            ));
        }
        let by_size = self.aligned_by_size(ALIGNED.name);
        for r in &by_size {
            t.push(ratio_target(
                &format!(
                    "{}: aligned, no digest peak RSS ≤ 32 MiB",
                    size_label(r.size_bytes)
                ),
                r.peak_rss_bytes.median,
                32.0 * MIB as f64,
                &hb,
            ));
        }
        if let Some(parent) = self.parent(self.largest, ps, Content::Compressible) {
            if let Some(al) = self.main_row(ALIGNED.name) {
                t.push(ratio_target(
                    &format!(
                        "{}: aligned, no digest bytes read ≤ 1.2 × (Index + CompressionInfo + Statistics + Summary)",
                        size_label(self.largest)
                    ),
                    al.read_bytes.median,
                    1.2 * parent.index_side_bytes as f64,
                    &hb,
                ));
                let floor =
                    al.rebuilt_component_bytes + (al.children as u64 * parent.chunk_length) as f64;
                t.push(ratio_target(
                    &format!(
                        "{}: aligned, no digest bytes written ≤ 1.2 × (rebuilt components + one chunk per child)",
                        size_label(self.largest)
                    ),
                    al.write_bytes.median,
                    1.2 * floor,
                    &hb,
                ));
            }
            // Issue 4's targets, where their configurations ran.
            if let (Some(al), Some(rg)) = (self.main_row(ALIGNED.name), self.main_row(REGRID.name))
            {
                t.push(speedup_target(
                    "(issue 4) aligned, no digest: wall ≥ 300× below regrid",
                    rg.wall_s.median,
                    al.wall_s.median,
                    300.0,
                ));
            }
            if let Some(cb) = self.main_row(DIGEST_COMBINE.name) {
                t.push(ratio_target(
                    "(issue 4) aligned + digest combine: bytes read ≤ chunk count × 4 KiB",
                    cb.read_bytes.median,
                    (parent.chunks * 4096) as f64,
                    &hb,
                ));
            }
        }
        // Incompressible data: every aligned child of every run (all cut sets).
        let random: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| {
                r.content == Content::Random
                    && r.children_fallback.is_some()
                    && r.config != ALIGNED_BASELINE.name
            })
            .collect();
        if !random.is_empty() {
            let children: usize = random.iter().map(|r| r.children_sum).sum();
            let fell: usize = random.iter().map(|r| r.children_fallback_sum).sum();
            let sizes: Vec<String> = {
                let mut v: Vec<u64> = random.iter().map(|r| r.size_bytes).collect();
                v.dedup();
                v.into_iter().map(size_label).collect()
            };
            let holds = fell * 64 <= children;
            t.push(Target {
                name: format!(
                    "{} incompressible (gen --random): aligned children falling back ≤ 1 in 64",
                    sizes.join(", ")
                ),
                measured: format!("{fell} of {children}"),
                limit: "≤ 1 in 64".into(),
                holds: Some(holds),
                margin: if children < 64 {
                    format!("only {children} children measured: fewer than 64")
                } else {
                    format!("1 in {:.0}", children as f64 / fell.max(1) as f64)
                },
            });
        }
        t
    }
}

// ---------------------------------------------------------------------------------------
// Output

fn csv(rows: &[Row], parents: &[ParentInfo]) -> String {
    let mut s = String::from(
        "size_gib,partition_size,content,partitions,parent_data_file_bytes,config,fs,cache,runs,\
wall_s_median,wall_s_min,wall_s_max,process_wall_s_median,cpu_s_median,cpu_s_min,cpu_s_max,\
read_bytes_median,read_bytes_min,read_bytes_max,write_bytes_median,write_bytes_min,write_bytes_max,\
peak_rss_bytes_median,peak_rss_bytes_max,bytes_shared,bytes_copied,bytes_reencoded,\
fiemap_shared_bytes,space_used_bytes,children,children_fallback,check,\
cpu_us_per_partition,cpu_us_per_chunk,device_flushes_median,backing_flushes_median\n",
    );
    let o = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.0}"));
    for r in rows {
        let p = parents.iter().find(|p| {
            p.size_bytes == r.size_bytes
                && p.partition_size == r.partition_size
                && p.content == r.content
        });
        s.push_str(&format!(
            "{},{},{},{},{},\"{}\",{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{},{},{},{:.0},{:.0},{},{},{},{},{},{},{}\n",
            r.size_bytes as f64 / GIB as f64,
            r.partition_size,
            serde_json::to_value(r.content).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
            p.map_or(0, |p| p.partitions),
            p.map_or(0, |p| p.data_file_bytes),
            r.config,
            serde_json::to_value(r.fs).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
            r.cache,
            r.runs,
            r.wall_s.median,
            r.wall_s.min,
            r.wall_s.max,
            r.process_wall_s.median,
            r.cpu_s.median,
            r.cpu_s.min,
            r.cpu_s.max,
            r.read_bytes.median,
            r.read_bytes.min,
            r.read_bytes.max,
            r.write_bytes.median,
            r.write_bytes.min,
            r.write_bytes.max,
            r.peak_rss_bytes.median,
            r.peak_rss_bytes.max,
            o(r.bytes_shared),
            o(r.bytes_copied),
            o(r.bytes_reencoded),
            r.fiemap_shared_bytes,
            r.space_used_bytes,
            r.children,
            r.children_fallback.map_or(String::new(), |n| n.to_string()),
            r.check,
            r.cpu_us_per_partition.map_or(String::new(), |v| format!("{v:.4}")),
            r.cpu_us_per_chunk.map_or(String::new(), |v| format!("{v:.4}")),
            r.device_flushes.as_ref().map_or(String::new(), |v| format!("{:.0}", v.median)),
            r.backing_flushes.as_ref().map_or(String::new(), |v| format!("{:.0}", v.median)),
        ));
    }
    s
}

fn secs_show(s: &Stat) -> String {
    let f = |v: f64| {
        if v >= 10.0 {
            format!("{v:.1}")
        } else if v >= 1.0 {
            format!("{v:.2}")
        } else {
            format!("{v:.3}")
        }
    };
    format!("{} s ({}–{})", f(s.median), f(s.min), f(s.max))
}

fn us_cell(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.3} µs"))
}

/// Median flushes a run on the loop device / on the disk holding its image.
fn flush_cell(r: &Row) -> String {
    let m = |s: &Option<Stat>| {
        s.as_ref()
            .map_or("-".into(), |s| format!("{:.0}", s.median))
    };
    format!("{} / {}", m(&r.device_flushes), m(&r.backing_flushes))
}

fn opt_human(x: Option<f64>) -> String {
    x.map_or("n/a".into(), human)
}

/// Shared bytes for the table: the split's own figure, or FIEMAP for cp.
fn shared_cell(r: &Row) -> String {
    match r.bytes_shared {
        Some(b) => human(b),
        None => format!("{} (FIEMAP)", human(r.fiemap_shared_bytes)),
    }
}

fn markdown(rep: &Report, env: &Value) -> String {
    let mut s = String::new();
    let a = rep.a;
    let largest = rep.largest;
    let parent = rep.parent(largest, a.partition_size, Content::Compressible);
    s.push_str(&format!(
        "### The table: {} parent, {}-way split, cold cache\n\n",
        size_label(largest),
        a.parts
    ));
    if let Some(p) = parent {
        s.push_str(&format!(
            "Parent: `cleave gen --size {} --partition-size {} --row-size {} --chunk {} --version {} --compressible`: \
{} partitions, Data.db {} on disk ({} uncompressed, {} chunks of {}), Index+CompressionInfo+Statistics+Summary {}. \
Median of {} runs, (min–max) for wall. Wall = process start to exit + `syncfs` of the output filesystem.\n\n",
            size_label(largest),
            size_label(a.partition_size),
            size_label(a.row_size),
            size_label(a.chunk),
            a.version,
            p.partitions,
            human(p.data_file_bytes as f64),
            human(p.data_length as f64),
            p.chunks,
            size_label(p.chunk_length),
            human(p.index_side_bytes as f64),
            a.iterations
        ));
    }
    s.push_str("| configuration | filesystem | wall | CPU user+sys | CPU a partition | CPU a chunk | device flushes (loop / its disk) | read | written | peak RSS | shared | copied | re-encoded | check |\n");
    s.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for c in MAIN {
        if let Some(r) = rep.main_row(c.name) {
            s.push_str(&format!(
                "| {} | {} | {} | {:.3} s | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.config,
                match r.fs {
                    Fs::Xfs => "XFS loop",
                    Fs::Plain => "plain disk",
                },
                secs_show(&r.wall_s),
                r.cpu_s.median,
                us_cell(r.cpu_us_per_partition),
                us_cell(r.cpu_us_per_chunk),
                flush_cell(r),
                human(r.read_bytes.median),
                human(r.write_bytes.median),
                human(r.peak_rss_bytes.median),
                shared_cell(r),
                opt_human(r.bytes_copied),
                opt_human(r.bytes_reencoded),
                r.check,
            ));
        }
    }
    let checked: Vec<&Run> = rep.runs.iter().filter(|r| r.check_ok.is_some()).collect();
    if let Some(fp) = rep
        .runs
        .iter()
        .find(|r| {
            r.size_bytes == largest
                && r.partition_size == a.partition_size
                && r.content == Content::Compressible
        })
        .and_then(|r| r.check_parent.as_ref())
    {
        s.push_str(&format!(
            "\nCheck: the parent's (partition count, xor, sum of a 64-bit key hash) is ({}, {}, {}); \
the children's matched it in {} of {} split runs of this benchmark (all sizes). n/a: `cp` has no such check.\n",
            fp.count,
            fp.xor,
            fp.sum,
            checked.iter().filter(|r| r.check_ok == Some(true)).count(),
            checked.len()
        ));
    }
    s.push('\n');

    // Targets
    s.push_str(
        "### Targets\n\n| target | measured | limit | holds | margin |\n|---|---|---|---|---|\n",
    );
    for t in rep.targets() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            t.name,
            t.measured,
            t.limit,
            match t.holds {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "partly",
            },
            t.margin
        ));
    }
    s.push('\n');

    // Digest cold vs warm
    let warm_ran = rep.rows.iter().any(|r| r.cache == "warm");
    if warm_ran {
        s.push_str(&format!(
        "### Digest: none vs combine vs full, cold and warm ({})\n\n| configuration | cache | wall | CPU | read | parent resident before the run |\n|---|---|--:|--:|--:|--:|\n",
        size_label(largest)
    ));
        for c in WARM.iter().rev() {
            for cache in ["cold", "warm"] {
                if let Some(r) = rep.row(
                    largest,
                    a.partition_size,
                    Content::Compressible,
                    c.name,
                    cache,
                ) {
                    s.push_str(&format!(
                        "| {} | {} | {} | {:.3} s | {} | {} |\n",
                        c.name,
                        cache,
                        secs_show(&r.wall_s),
                        r.cpu_s.median,
                        human(r.read_bytes.median),
                        human(r.parent_resident_bytes_max)
                    ));
                }
            }
        }
        s.push('\n');
    }

    // combine with readahead 0
    let ra0: Vec<&Row> = rep
        .rows
        .iter()
        .filter(|r| r.config == COMBINE_RA0.name)
        .collect();
    for r in ra0 {
        let (size, ps) = (r.size_bytes, r.partition_size);
        if let (Some(p), Some(normal)) = (
            rep.parent(size, ps, Content::Compressible),
            rep.row(size, ps, Content::Compressible, DIGEST_COMBINE.name, "cold"),
        ) {
            s.push_str(&format!(
                "### `combine` and readahead ({} parent, {} chunks, Data.db {})\n\n| configuration | wall | CPU | read | chunk count × 4 KiB |\n|---|--:|--:|--:|--:|\n",
                size_label(size),
                p.chunks,
                human(p.data_file_bytes as f64)
            ));
            for x in [normal, r] {
                s.push_str(&format!(
                    "| {} | {} | {:.3} s | {} | {} |\n",
                    x.config,
                    secs_show(&x.wall_s),
                    x.cpu_s.median,
                    human(x.read_bytes.median),
                    human((p.chunks * 4096) as f64)
                ));
            }
            s.push('\n');
        }
    }

    // Partition count
    let wide = a.wide_partition_size;
    let wide_size = rep
        .parents
        .iter()
        .find(|p| p.partition_size == wide && p.content == Content::Compressible)
        .map_or(largest, |p| p.size_bytes);
    if let (Some(n), Some(w)) = (
        rep.row(
            wide_size,
            a.partition_size,
            Content::Compressible,
            ALIGNED.name,
            "cold",
        ),
        rep.row(wide_size, wide, Content::Compressible, ALIGNED.name, "cold"),
    ) {
        s.push_str(&format!(
            "### Partition count, not bytes: aligned, no digest, {} parent\n\n| partition size | partitions | Index.db | wall | CPU | read | written | peak RSS |\n|--:|--:|--:|--:|--:|--:|--:|--:|\n",
            size_label(wide_size)
        ));
        for (r, ps) in [(n, a.partition_size), (w, wide)] {
            let p = rep.parent(wide_size, ps, Content::Compressible);
            s.push_str(&format!(
                "| {} | {} | {} | {} | {:.3} s | {} | {} | {} |\n",
                size_label(ps),
                p.map_or(0, |p| p.partitions),
                human(p.map_or(0, |p| {
                    p.component_bytes.get("Index.db").copied().unwrap_or(0)
                }) as f64),
                secs_show(&r.wall_s),
                r.cpu_s.median,
                human(r.read_bytes.median),
                human(r.write_bytes.median),
                human(r.peak_rss_bytes.median)
            ));
        }
        s.push('\n');
    }

    // CPU = fixed + per partition + per chunk, least squares through every parent.
    for (config, fit, n) in [ALIGNED.name, ALIGNED_BASELINE.name]
        .into_iter()
        .filter_map(|c| rep.cpu_fit(c).map(|(f, n)| (c, f, n)))
    {
        s.push_str(&format!(
            "CPU of `{config}` fitted (least squares) to fixed + per partition + per chunk \
through the cold runs of {n} parents (every size of {} partitions, and {} partitions): \
{:.0} ms + {:.3} µs a partition + {:.4} µs a chunk.\n\n",
            size_label(a.partition_size),
            size_label(wide),
            fit.0 * 1e3,
            fit.1 * 1e6,
            fit.2 * 1e6
        ));
    }

    // aligned by size, against cp of the same parent in the same run
    let by_size = rep.aligned_by_size(ALIGNED.name);
    let before = rep.aligned_by_size(ALIGNED_BASELINE.name);
    if !before.is_empty() {
        s.push_str("### Before/after: `aligned, no digest`, this binary against the baseline binary, same parents, same run, cold\n\n| parent | partitions | chunks | wall before | wall after | CPU before | CPU after | peak RSS before | peak RSS after | read before | read after | written before | written after |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        for b in &before {
            let Some(r) = by_size.iter().find(|r| r.size_bytes == b.size_bytes) else {
                continue;
            };
            let p = rep.parent(b.size_bytes, b.partition_size, b.content);
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.3} s | {:.3} s | {} | {} | {} | {} | {} | {} |\n",
                size_label(b.size_bytes),
                p.map_or(0, |p| p.partitions),
                p.map_or(0, |p| p.chunks),
                secs_show(&b.wall_s),
                secs_show(&r.wall_s),
                b.cpu_s.median,
                r.cpu_s.median,
                human(b.peak_rss_bytes.median),
                human(r.peak_rss_bytes.median),
                human(b.read_bytes.median),
                human(r.read_bytes.median),
                human(b.write_bytes.median),
                human(r.write_bytes.median),
            ));
        }
        s.push('\n');
    }
    if !by_size.is_empty() {
        s.push_str("### `aligned, no digest` by parent size, cold\n\n| parent | partitions | chunks | Index side | wall | × faster than cp --reflink=never | ÷ cp --reflink=always | CPU | read | written | peak RSS | load (1 min) |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    }
    for r in by_size {
        let ps = r.partition_size;
        if let Some(p) = rep.parent(r.size_bytes, ps, r.content) {
            let cp = rep.row(r.size_bytes, ps, Content::Compressible, CP.name, "cold");
            let rl = rep.row(
                r.size_bytes,
                ps,
                Content::Compressible,
                CP_REFLINK.name,
                "cold",
            );
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.3} s | {} | {} | {} | {} |\n",
                size_label(r.size_bytes),
                p.partitions,
                p.chunks,
                human(p.index_side_bytes as f64),
                secs_show(&r.wall_s),
                cp.map_or("-".into(), |c| format!(
                    "{:.0}× ({:.2} s)",
                    c.wall_s.median / r.wall_s.median,
                    c.wall_s.median
                )),
                rl.map_or("-".into(), |c| format!(
                    "{:.1}× ({:.3} s)",
                    r.wall_s.median / c.wall_s.median,
                    c.wall_s.median
                )),
                r.cpu_s.median,
                human(r.read_bytes.median),
                human(r.write_bytes.median),
                human(r.peak_rss_bytes.median),
                r.load1
                    .map_or("-".into(), |l| l.show(|v| format!("{v:.1}"))),
            ));
        }
    }
    s.push('\n');

    // Incompressible
    let random: Vec<&Row> = rep
        .rows
        .iter()
        .filter(|r| r.content == Content::Random)
        .collect();
    if !random.is_empty() {
        s.push_str("### Incompressible data (`gen --random`)\n\n| parent | configuration | runs | children fell back (all runs) | bytes shared | bytes copied | bytes re-encoded | wall | read | written | fallback |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
        for r in random {
            let p = rep.parent(r.size_bytes, r.partition_size, r.content);
            s.push_str(&format!(
                "| {} ({} on disk) | {} | {} | {} of {} | {} | {} | {} | {} | {} | {} | {} |\n",
                size_label(r.size_bytes),
                human(p.map_or(0, |p| p.data_file_bytes) as f64),
                r.config,
                r.runs,
                r.children_fallback_sum,
                r.children_sum,
                opt_human(r.bytes_shared),
                opt_human(r.bytes_copied),
                opt_human(r.bytes_reencoded),
                secs_show(&r.wall_s),
                human(r.read_bytes.median),
                human(r.write_bytes.median),
                if r.fallback_reasons.is_empty() {
                    "-".to_string()
                } else {
                    r.fallback_reasons.join("; ")
                }
            ));
        }
        s.push('\n');
    }

    // Sweep
    let sizes: Vec<u64> = {
        let mut v: Vec<u64> = rep
            .rows
            .iter()
            .filter(|r| r.partition_size == a.partition_size && r.content == Content::Compressible)
            .map(|r| r.size_bytes)
            .collect();
        v.sort();
        v.dedup();
        v
    };
    s.push_str("### Sweep: median wall (s) by parent size, cold\n\n| configuration |");
    for z in &sizes {
        s.push_str(&format!(" {} |", size_label(*z)));
    }
    s.push_str("\n|---|");
    for _ in &sizes {
        s.push_str("--:|");
    }
    s.push('\n');
    for c in MAIN {
        if !rep.rows.iter().any(|r| r.config == c.name) {
            continue;
        }
        s.push_str(&format!("| {} |", c.name));
        for z in &sizes {
            match rep.row(*z, a.partition_size, Content::Compressible, c.name, "cold") {
                Some(r) => s.push_str(&format!(" {:.3} |", r.wall_s.median)),
                None => s.push_str(" - |"),
            }
        }
        s.push('\n');
    }
    s.push('\n');

    s.push_str("### Parents\n\n| parent | partitions | Data.db on disk | Index side | chunks | gen wall | gen MB/s (uncompressed) |\n|---|--:|--:|--:|--:|--:|--:|\n");
    for p in rep.parents {
        s.push_str(&format!(
            "| {} of {} partitions, {:?} | {} | {} | {} | {} | {:.1} s | {:.0} |\n",
            size_label(p.size_bytes),
            size_label(p.partition_size),
            p.content,
            p.partitions,
            human(p.data_file_bytes as f64),
            human(p.index_side_bytes as f64),
            p.chunks,
            p.gen_wall_s,
            p.gen_mb_per_s
        ));
    }
    s.push('\n');
    s.push_str(&format!(
        "Environment: `{}`\n",
        serde_json::to_string(env).unwrap_or_default()
    ));
    s
}

/// `/proc/loadavg` as it reads (1, 5, 15 minutes, runnable/total, last pid).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

pub fn environment(scratch: &Path, loop_dio: bool, load_start: &str) -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let meminfo = read("/proc/meminfo");
    let mem = proc::parse_status_kb(&meminfo, "MemTotal").unwrap_or(0) * 1024;
    let findmnt = |col: &str| {
        Command::new("findmnt")
            .args(["-n", "-o", col, "--target"])
            .arg(scratch)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu_model": model,
        "memory_bytes": mem,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "scratch_fs": findmnt("FSTYPE"),
        "scratch_device": findmnt("SOURCE"),
        "loop_direct_io": loop_dio,
        "drop_caches": proc::is_root(),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "cp": Command::new("cp").arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").to_string()).unwrap_or_default(),
    })
}

#[derive(Serialize)]
struct JsonReport<'a> {
    pub benchmark: &'static str,
    pub environment: Value,
    pub iterations: u32,
    pub parts: usize,
    pub parents: &'a [ParentInfo],
    pub rows: &'a [Row],
    pub targets: Vec<Target>,
    pub runs: &'a [Run],
}

/// What `--from-json` reads back from a previous run's split.json (rows and targets are
/// recomputed).
#[derive(Deserialize)]
struct Saved {
    pub environment: Value,
    pub iterations: u32,
    pub parts: usize,
    pub parents: Vec<ParentInfo>,
    pub runs: Vec<Run>,
}

/// The report of a sweep: the markdown tables and the JSON document (also written into
/// `report_dir`).
pub struct Output {
    pub markdown: String,
    pub json: String,
}

pub fn from_json(a: &SplitBenchOptions, path: &Path) -> Result<Output> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let saved: Saved =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let largest = saved
        .parents
        .iter()
        .filter(|p| p.content == Content::Compressible && p.partition_size == a.partition_size)
        .map(|p| p.size_bytes)
        .max()
        .ok_or_else(|| {
            anyhow!(
                "{}: no parent of {} partitions",
                path.display(),
                size_label(a.partition_size)
            )
        })?;
    let mut a = a.clone();
    a.iterations = saved.iterations;
    a.parts = saved.parts;
    emit(&a, &saved.parents, &saved.runs, saved.environment, largest)
}

/// Writes the report files (with `report_dir`) and returns the tables and the JSON.
pub fn emit(
    a: &SplitBenchOptions,
    parents: &[ParentInfo],
    runs: &[Run],
    env: Value,
    largest: u64,
) -> Result<Output> {
    let rows = aggregate(runs, parents);
    let rep = Report {
        parents,
        runs,
        rows: &rows,
        largest,
        a,
    };
    let md = markdown(&rep, &env);
    let json = JsonReport {
        benchmark: "split",
        environment: env.clone(),
        iterations: a.iterations,
        parts: a.parts,
        parents,
        rows: &rows,
        targets: rep.targets(),
        runs,
    };
    let json = serde_json::to_string_pretty(&json)? + "\n";
    if let Some(dir) = &a.report_dir {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("split.csv"), csv(&rows, parents))?;
        std::fs::write(dir.join("split.json"), &json)?;
        std::fs::write(dir.join("split.md"), &md)?;
        super::plot::plot(&dir.join("split.svg"), &rep)?;
    }
    Ok(Output { markdown: md, json })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(size_label(16 * GIB), "16 GiB");
        assert_eq!(size_label(64 * 1024), "64 KiB");
        assert_eq!(human(1.5 * GIB as f64), "1.50 GiB");
        assert_eq!(human(57.0 * MIB as f64), "57.0 MiB");
    }

    #[test]
    fn targets_say_by_how_much() {
        let t = ratio_target("x", 150.0, 100.0, &|v| format!("{v:.0}"));
        assert_eq!(t.holds, Some(false));
        assert!(t.margin.contains("missed by 50"), "{}", t.margin);
        let t = speedup_target("y", 30.0, 0.1, 100.0);
        assert_eq!(t.holds, Some(true));
        let t = speedup_target("y", 30.0, 0.5, 100.0);
        assert_eq!(t.holds, Some(false));
    }
}

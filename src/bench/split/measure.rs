//! One timed run of one configuration on one parent, measured from outside: the child
//! process (this very binary, or `cp`) is measured by `crate::io::child` (wall, rusage,
//! `/proc/<pid>/io`), the output filesystem is `syncfs`ed right after the exit so that `cp`,
//! which does not fsync, pays for its writeback like the split does, and FIEMAP and statvfs
//! say what the outputs share and cost.
//!
//! Cold cache before every cold run: the output directory emptied, `sync`,
//! `POSIX_FADV_DONTNEED` on every component of the parent and on the loop image, and, as
//! root, `3` written to `/proc/sys/vm/drop_caches`; `/proc/meminfo` Cached is read before
//! and after the drop and the parent's resident pages are counted with `mincore`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Config, Content, Fixture, Fs, Tool};
use crate::bench::SplitMix64;
use crate::io::{cache, child, durable, fs, loopfs, proc};

/// A generated parent on one filesystem.
pub struct Parent {
    pub data: PathBuf,
    pub files: Vec<PathBuf>,
}

/// `syncfs` of the filesystem holding `dir`; returns how long it took.
pub fn syncfs(dir: &Path) -> Result<Duration> {
    let t0 = std::time::Instant::now();
    durable::syncfs(dir).with_context(|| format!("syncfs of {}", dir.display()))?;
    Ok(t0.elapsed())
}

fn used_bytes(dir: &Path) -> Result<u64> {
    fs::used_bytes(dir).with_context(|| format!("statvfs of {}", dir.display()))
}

/// The 1-minute load average (`/proc/loadavg`), if readable.
pub fn loadavg1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `n` distinct Murmur3 tokens, sorted, from a seeded generator: a cut set for `--tokens`.
/// `i64::MIN` is the partitioner's minimum token, never a key's, so it is not a cut.
pub fn random_tokens(n: usize, seed: u64) -> Vec<i64> {
    let mut rng = SplitMix64::new(0x5EED_C075_0000_0000 ^ seed);
    let mut v: Vec<i64> = Vec::with_capacity(n);
    while v.len() < n {
        let t = rng.next_u64() as i64;
        if t != i64::MIN && !v.contains(&t) {
            v.push(t);
        }
    }
    v.sort_unstable();
    v
}

/// The file `program` runs: itself when it has a slash, else the first match on PATH.
fn resolve_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return Some(program.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    v.retain(|p| p.is_file());
    v.sort();
    Ok(v)
}

pub fn clear_dir(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        }
        .with_context(|| format!("removing {}", p.display()))?;
    }
    Ok(())
}

/// The state of the page cache right before a timed run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CacheCheck {
    /// `/proc/meminfo` Cached before and after dropping (cold runs; equal for warm runs).
    pub cached_before_bytes: u64,
    pub cached_after_bytes: u64,
    /// Whether `3` was written to /proc/sys/vm/drop_caches.
    pub drop_caches: bool,
    /// Parent bytes in the page cache right before the run (mincore, all components).
    pub parent_resident_bytes: u64,
}

/// Empties the page cache of the parent (and of the loop image under it).
pub fn make_cold(parent_files: &[PathBuf], image: Option<&Path>) -> Result<CacheCheck> {
    // Dirty pages cannot be dropped: write them first.
    cache::sync_all();
    for p in parent_files.iter().map(PathBuf::as_path).chain(image) {
        let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
        fs::drop_cache(&f, 0, 0);
    }
    let cached_before = cache::meminfo_cached().context("reading /proc/meminfo")?;
    let drop_caches = proc::is_root() && cache::drop_caches().is_ok();
    let cached_after = cache::meminfo_cached().context("reading /proc/meminfo")?;
    Ok(CacheCheck {
        cached_before_bytes: cached_before,
        cached_after_bytes: cached_after,
        drop_caches,
        parent_resident_bytes: parent_resident(parent_files)?,
    })
}

pub fn parent_resident(parent_files: &[PathBuf]) -> Result<u64> {
    parent_files
        .iter()
        .map(|p| cache::resident_bytes(p).with_context(|| format!("mincore of {}", p.display())))
        .sum()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fingerprint {
    pub count: u64,
    pub xor: String,
    pub sum: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub size_bytes: u64,
    pub partition_size: u64,
    pub content: Content,
    pub config: String,
    pub fs: Fs,
    pub cache: String,
    pub iteration: u32,
    /// Spawn to exit.
    pub process_wall_s: f64,
    /// syncfs of the output filesystem right after the exit.
    pub sync_s: f64,
    /// process_wall_s + sync_s: what the tables report as wall.
    pub wall_s: f64,
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub rchar: u64,
    pub wchar: u64,
    pub peak_rss_bytes: u64,
    /// From the split's JSON (None for cp).
    pub bytes_shared: Option<u64>,
    pub bytes_copied: Option<u64>,
    pub bytes_reencoded: Option<u64>,
    pub children: usize,
    /// Children whose layout is not the one asked for, or that carry a fallback reason.
    pub children_fallback: Option<usize>,
    pub fallback_reasons: Vec<String>,
    /// Children's Data.db bytes in extents FIEMAP reports shared.
    pub fiemap_shared_bytes: u64,
    /// Growth of the output filesystem's used bytes over the run (after syncfs).
    pub space_used_bytes: i64,
    /// Outputs other than Data.db: the rebuilt components.
    pub rebuilt_component_bytes: u64,
    pub check_ok: Option<bool>,
    pub check_parent: Option<Fingerprint>,
    pub check_children: Option<Fingerprint>,
    /// The split's own /proc/self/io figures, for cross-checking.
    pub self_read_bytes: Option<u64>,
    pub self_write_bytes: Option<u64>,
    pub cache_check: CacheCheck,
    /// The `--tokens` of a random-cut run.
    #[serde(default)]
    pub tokens: Option<Vec<i64>>,
    /// 1-minute load average right before the run (`/proc/loadavg`): other work on the
    /// machine shows in the wall, not in the CPU.
    #[serde(default)]
    pub load1: Option<f64>,
    /// Flush requests the output filesystem's device (the loop device) completed from the
    /// start of the run to the end of its `syncfs` (`/proc/diskstats`): the cache flushes
    /// the split's fsyncs (and the final syncfs) cost. Only this run writes to it.
    #[serde(default)]
    pub device_flushes: Option<u64>,
    /// The same on the device that holds the loop image: what reaches the real disk, but
    /// shared with everything else on the machine (other builds count too).
    #[serde(default)]
    pub backing_flushes: Option<u64>,
}

impl Run {
    pub fn cpu_s(&self) -> f64 {
        self.cpu_user_s + self.cpu_system_s
    }
}

fn fingerprint(v: &Value) -> Option<Fingerprint> {
    Some(Fingerprint {
        count: v.get("count")?.as_u64()?,
        xor: v.get("xor")?.as_str()?.to_string(),
        sum: v.get("sum")?.as_str()?.to_string(),
    })
}

pub struct RunCtx<'a> {
    pub exe: &'a Path,
    pub baseline_exe: Option<&'a Path>,
    pub parts: usize,
    pub parent: &'a Parent,
    pub out: &'a Path,
    pub image: Option<&'a Path>,
    pub mount: Option<&'a Path>,
}

/// The flags of `cleave split` after `<parent> --out <dir>` for a split configuration:
/// `--tokens` (random cuts) or `--parts`, layout, digest, target, `--json`. Empty for `cp`.
pub(crate) fn split_args(tool: Tool, parts: usize, tokens: Option<&[i64]>) -> Vec<String> {
    let Tool::Split {
        layout,
        digest,
        target_cassandra,
        ..
    } = tool
    else {
        return Vec::new();
    };
    let mut v = Vec::new();
    match tokens {
        Some(t) => {
            let list: Vec<String> = t.iter().map(i64::to_string).collect();
            // `=`: the first token may be negative and must not read as a flag.
            v.push(format!("--tokens={}", list.join(",")));
        }
        None => v.extend(["--parts".to_string(), parts.to_string()]),
    }
    v.extend(["--layout", layout, "--digest", digest].map(String::from));
    if layout == "padded" {
        v.extend(["--target-data-access", "standard"].map(String::from));
    }
    if let Some(t) = target_cassandra {
        v.extend(["--target-cassandra".to_string(), t.to_string()]);
    }
    v.push("--json".to_string());
    v
}

pub fn run_once(
    ctx: &RunCtx,
    fx: &Fixture,
    config: &Config,
    cold: bool,
    iteration: u32,
) -> Result<Run> {
    clear_dir(ctx.out)?;
    if let Some(m) = ctx.mount {
        // Give the freed blocks back to the sparse image (best effort).
        let _ = Command::new("fstrim").arg(m).output();
    }
    syncfs(ctx.out)?;
    let used_before = used_bytes(ctx.out)?;
    let cache_check = if cold {
        make_cold(&ctx.parent.files, ctx.image)?
    } else {
        let c = cache::meminfo_cached().context("reading /proc/meminfo")?;
        CacheCheck {
            cached_before_bytes: c,
            cached_after_bytes: c,
            drop_caches: false,
            parent_resident_bytes: parent_resident(&ctx.parent.files)?,
        }
    };
    let mut cmd;
    let mut tokens = None;
    match config.tool {
        Tool::Split {
            random_cuts,
            baseline,
            ..
        } => {
            cmd = Command::new(match (baseline, ctx.baseline_exe) {
                (true, Some(b)) => b,
                (true, None) => bail!("{}: no baseline binary", config.name),
                (false, _) => ctx.exe,
            });
            cmd.arg("split")
                .arg(&ctx.parent.data)
                .arg("--out")
                .arg(ctx.out);
            if random_cuts {
                tokens = Some(random_tokens(
                    ctx.parts.saturating_sub(1),
                    u64::from(iteration),
                ));
            }
            cmd.args(split_args(config.tool, ctx.parts, tokens.as_deref()));
        }
        Tool::Cp | Tool::CpReflink => {
            cmd = Command::new("cp");
            cmd.arg(if config.tool == Tool::Cp {
                "--reflink=never"
            } else {
                "--reflink=always"
            })
            .arg(&ctx.parent.data)
            .arg(ctx.out.join("copy-Data.db"));
        }
    }
    // The program is not the data: read its executable and run it once (shared libraries)
    // before the timed run, so that a cold run's read_bytes counts the sstable, not the
    // binary being paged in.
    if let Some(exe) = resolve_program(Path::new(cmd.get_program())) {
        if let Ok(mut f) = File::open(&exe) {
            let _ = std::io::copy(&mut f, &mut std::io::sink());
        }
    }
    let _ = Command::new(cmd.get_program())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let load1 = loadavg1();
    let dev = proc::BlockDevice::of(ctx.out).ok();
    let backing = dev.and_then(proc::BlockDevice::loop_backing);
    let flushes =
        |d: Option<proc::BlockDevice>| d.and_then(|d| d.flushes_completed().ok().flatten());
    let flushes_before = (flushes(dev), flushes(backing));
    let m = child::measure(&mut cmd).with_context(|| format!("running {cmd:?}"))?;
    if m.exit_code != Some(0) {
        bail!(
            "{} ({}) failed with {:?}: {}",
            config.name,
            fx.role,
            m.exit_code,
            m.stderr.trim()
        );
    }
    let sync = syncfs(ctx.out)?;
    let since = |before: Option<u64>, now: Option<u64>| Some(now?.saturating_sub(before?));
    let device_flushes = since(flushes_before.0, flushes(dev));
    let backing_flushes = since(flushes_before.1, flushes(backing));
    let used_after = used_bytes(ctx.out)?;
    let mut fiemap_shared = 0;
    let mut rebuilt = 0;
    let mut children = 0;
    for f in files_in(ctx.out)? {
        if f.to_string_lossy().ends_with("Data.db") {
            children += 1;
            fiemap_shared += loopfs::shared_bytes(&f).unwrap_or(0);
        } else {
            rebuilt += std::fs::metadata(&f)?.len();
        }
    }
    let json: Option<Value> = match config.tool {
        Tool::Split { .. } => Some(
            serde_json::from_slice(&m.stdout)
                .with_context(|| format!("parsing the JSON report of {}", config.name))?,
        ),
        _ => None,
    };
    let get = |k: &str| json.as_ref().and_then(|j| j.get(k)).and_then(Value::as_u64);
    let (children_fallback, fallback_reasons) = match (&json, config.tool) {
        (Some(j), Tool::Split { layout, .. }) => {
            let cs = j
                .get("children")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut reasons: Vec<String> = Vec::new();
            let mut n = 0;
            for c in &cs {
                let reason = c
                    .get("fallback")
                    .and_then(|f| f.get("message"))
                    .and_then(Value::as_str);
                let got = c.get("layout").and_then(Value::as_str).unwrap_or("");
                if reason.is_some() || got != layout {
                    n += 1;
                    let r = format!("{got}: {}", reason.unwrap_or("-"));
                    if !reasons.contains(&r) {
                        reasons.push(r);
                    }
                }
            }
            (Some(n), reasons)
        }
        _ => (None, Vec::new()),
    };
    let check = json.as_ref().and_then(|j| j.get("check"));
    let run = Run {
        size_bytes: fx.size,
        partition_size: fx.partition_size,
        content: fx.content,
        config: config.name.to_string(),
        fs: config.fs,
        cache: if cold { "cold" } else { "warm" }.to_string(),
        iteration,
        process_wall_s: m.wall.as_secs_f64(),
        sync_s: sync.as_secs_f64(),
        wall_s: (m.wall + sync).as_secs_f64(),
        cpu_user_s: m.user.as_secs_f64(),
        cpu_system_s: m.system.as_secs_f64(),
        read_bytes: m.io.read_bytes,
        write_bytes: m.io.write_bytes,
        rchar: m.io.rchar,
        wchar: m.io.wchar,
        peak_rss_bytes: m.peak_rss_bytes,
        bytes_shared: get("bytes_shared"),
        bytes_copied: get("bytes_copied"),
        bytes_reencoded: get("bytes_reencoded"),
        children,
        children_fallback,
        fallback_reasons,
        fiemap_shared_bytes: fiemap_shared,
        space_used_bytes: used_after as i64 - used_before as i64,
        rebuilt_component_bytes: rebuilt,
        check_ok: check.and_then(|c| c.get("ok")).and_then(Value::as_bool),
        check_parent: check.and_then(|c| c.get("parent")).and_then(fingerprint),
        check_children: check.and_then(|c| c.get("children")).and_then(fingerprint),
        self_read_bytes: get("read_bytes"),
        self_write_bytes: get("write_bytes"),
        cache_check,
        tokens,
        load1,
        device_flushes,
        backing_flushes,
    };
    if run.check_ok == Some(false) {
        bail!(
            "{} ({}): the children's (count, xor, sum) differs from the parent's: {:?} vs {:?}",
            config.name,
            fx.role,
            run.check_children,
            run.check_parent
        );
    }
    clear_dir(ctx.out)?;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_cut_sets_are_sorted_distinct_and_seeded() {
        let a = random_tokens(7, 1);
        assert_eq!(a.len(), 7);
        assert!(a.windows(2).all(|w| w[0] < w[1]), "{a:?}");
        assert_eq!(a, random_tokens(7, 1));
        assert_ne!(a, random_tokens(7, 2));
        assert!(random_tokens(0, 1).is_empty());
    }

    #[test]
    fn split_args_of_each_configuration() {
        use crate::bench::split::{ALIGNED, ALIGNED_41, ALIGNED_BASELINE, CP, PADDED};
        let args = |c: crate::bench::split::Config| split_args(c.tool, 8, None).join(" ");
        // The existing keys' arguments are what they were: no target, the split's default.
        assert_eq!(
            args(ALIGNED),
            "--parts 8 --layout aligned --digest off --json"
        );
        assert_eq!(args(ALIGNED_BASELINE), args(ALIGNED));
        assert_eq!(
            args(PADDED),
            "--parts 8 --layout padded --digest off --target-data-access standard --json"
        );
        // aligned-4.1: the same split for an explicit 4.1 target (dead prefix allowed).
        assert_eq!(
            args(ALIGNED_41),
            "--parts 8 --layout aligned --digest off --target-cassandra 4.1 --json"
        );
        assert_eq!(ALIGNED_41.key, "aligned-4.1");
        assert!(split_args(CP.tool, 8, None).is_empty());
        assert_eq!(
            split_args(ALIGNED.tool, 8, Some(&[-5, 7])).join(" "),
            "--tokens=-5,7 --layout aligned --digest off --json"
        );
    }
}

//! `cleave bench split`: the CASSANDRA-21550 table on this machine (issue 4).
//!
//! For each parent size a fresh XFS (reflink=1) loop mount is made on a sparse image under
//! the scratch directory; `cleave gen` writes the parent into it, a copy of the parent goes
//! to the plain disk (for `copy` there), and every configuration runs `--iterations` times,
//! iteration by iteration so that a slow patch of the shared machine hits all of them. Each
//! timed run is a child process (this very binary, or `cp`), measured from outside:
//!
//! * wall time from spawn to exit, plus a `syncfs` of the output filesystem right after
//!   (so that `cp`, which does not fsync, pays for its writeback like the split does);
//! * CPU user+sys and peak RSS from `wait4`'s rusage of that child;
//! * bytes read and written at the block layer from `/proc/<pid>/io`, read while the child
//!   is a zombie (`waitid(WNOWAIT)`), i.e. after it exited and before it is reaped;
//! * shared/copied/re-encoded bytes and the (count, xor, sum) check from the split's JSON,
//!   shared extents of the outputs from FIEMAP, space used from statvfs.
//!
//! Cold cache before every cold run: the output directory emptied, `sync`,
//! `POSIX_FADV_DONTNEED` on every component of the parent and on the loop image, and, as
//! root, `3` written to `/proc/sys/vm/drop_caches`; `/proc/meminfo` Cached is read before
//! and after the drop and the parent's resident pages are counted with `mincore`.
//!
//! Everything created (mounts, images, parents, children) is removed by guards, also when a
//! run fails.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cleave::io::loopfs::{self, LoopMount};
use cleave::io::proc::{self, IoCounters};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{CommonArgs, ScratchDir, Stat};
use crate::cli::gen::parse_size;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

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
    /// Partition size of the extra `aligned, no digest` run at the largest size (same total
    /// bytes, fewer partitions); 0 skips it.
    #[arg(long, value_parser = parse_size, default_value = "1MiB")]
    pub wide_partition_size: u64,
    /// Size of the incompressible (`gen --random`) parent; default the largest of --sizes;
    /// 0 skips it.
    #[arg(long, value_parser = parse_gib)]
    pub random_size: Option<u64>,
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

// ---------------------------------------------------------------------------------------
// Configurations

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Fs {
    /// The XFS reflink=1 loop mount.
    Xfs,
    /// The plain disk the scratch directory is on.
    Plain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Split {
        layout: &'static str,
        digest: &'static str,
    },
    /// `cp --reflink=never` (coreutils 9 reflinks by default on XFS).
    Cp,
    CpReflink,
}

#[derive(Debug, Clone, Copy)]
struct Config {
    name: &'static str,
    tool: Tool,
    fs: Fs,
}

const fn split(name: &'static str, layout: &'static str, digest: &'static str, fs: Fs) -> Config {
    Config {
        name,
        tool: Tool::Split { layout, digest },
        fs,
    }
}

const REGRID: Config = split("regrid", "regrid", "off", Fs::Xfs);
const COPY: Config = split("copy", "copy", "off", Fs::Xfs);
const COPY_PLAIN: Config = split("copy (plain disk)", "copy", "off", Fs::Plain);
const DIGEST_FULL: Config = split("aligned + digest full", "aligned", "full", Fs::Xfs);
const DIGEST_COMBINE: Config = split("aligned + digest combine", "aligned", "combine", Fs::Xfs);
const ALIGNED: Config = split("aligned, no digest", "aligned", "off", Fs::Xfs);
const PADDED: Config = split("padded, no digest", "padded", "off", Fs::Xfs);
const CP: Config = Config {
    name: "cp --reflink=never",
    tool: Tool::Cp,
    fs: Fs::Xfs,
};
const CP_REFLINK: Config = Config {
    name: "cp --reflink=always",
    tool: Tool::CpReflink,
    fs: Fs::Xfs,
};

/// The table's rows, in the reference's order (slowest first).
const MAIN: [Config; 9] = [
    REGRID,
    COPY,
    COPY_PLAIN,
    DIGEST_FULL,
    DIGEST_COMBINE,
    ALIGNED,
    PADDED,
    CP,
    CP_REFLINK,
];
const WARM: [Config; 3] = [DIGEST_FULL, DIGEST_COMBINE, ALIGNED];
/// `combine` with the loop device's readahead set to 0: what it reads when only the pages
/// holding CRC trailers are fetched.
const COMBINE_RA0: Config = split(
    "aligned + digest combine, device readahead 0",
    "aligned",
    "combine",
    Fs::Xfs,
);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Content {
    Compressible,
    Random,
}

/// One generated parent and the configurations run on it.
#[derive(Debug, Clone)]
struct Fixture {
    size: u64,
    partition_size: u64,
    content: Content,
    configs: Vec<Config>,
    warm: Vec<Config>,
    /// Cold runs with the loop device's readahead at 0.
    no_readahead: Vec<Config>,
    /// What the fixture is for, in progress lines.
    role: &'static str,
}

impl Fixture {
    fn needs_plain_copy(&self) -> bool {
        self.configs.iter().any(|c| c.fs == Fs::Plain)
    }
}

// ---------------------------------------------------------------------------------------
// Measurements

/// What the kernel says about one finished child process.
#[derive(Debug, Clone)]
struct ChildMeasure {
    wall: Duration,
    exit_code: Option<i32>,
    user: Duration,
    system: Duration,
    /// `ru_maxrss` of the child (its `VmHWM`).
    peak_rss_bytes: u64,
    io: IoCounters,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `cmd` to completion and measures it: wall, rusage (wait4) and `/proc/<pid>/io`
/// (read between exit and reaping, so nothing the child did is missed).
fn measure(cmd: &mut Command) -> Result<ChildMeasure> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    let mut err_pipe = child.stderr.take().context("stderr pipe")?;
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut stdout)
            .context("reading child stdout")?;
    }
    // Wait for exit but leave the child a zombie: its /proc/<pid>/io is still there.
    loop {
        // SAFETY: siginfo_t is plain data; waitid writes it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("waitid");
        }
    }
    let wall = t0.elapsed();
    let io_text = std::fs::read_to_string(format!("/proc/{pid}/io"));
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 writes it and reaps the child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    if rc != pid {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    // The child is reaped: std's handle must not wait for it again (dropping it does not).
    drop(child);
    let stderr = err_thread.join().unwrap_or_default();
    let io = proc::parse_io(&io_text.context("reading /proc/<pid>/io of the child")?)
        .ok_or_else(|| anyhow!("unexpected /proc/<pid>/io"))?;
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok(ChildMeasure {
        wall,
        exit_code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        peak_rss_bytes: ru.ru_maxrss.max(0) as u64 * 1024,
        io,
        stdout,
        stderr,
    })
}

/// `/proc/meminfo` Cached, bytes.
fn meminfo_cached() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    proc::parse_status_kb(&text, "Cached")
        .map(|kb| kb * 1024)
        .ok_or_else(|| anyhow!("no Cached in /proc/meminfo"))
}

/// Bytes of `path` resident in the page cache (`mincore`).
fn resident_bytes(path: &Path) -> Result<u64> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(0);
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    // SAFETY: a read-only shared mapping of a file we hold open, never dereferenced, only
    // passed to mincore and unmapped below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error()).context("mmap for mincore");
    }
    let mut vec = vec![0u8; len.div_ceil(page) as usize];
    // SAFETY: addr..addr+len is our mapping and vec has one byte per page of it.
    let rc = unsafe { libc::mincore(addr, len as usize, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: unmapping exactly what was mapped.
    unsafe { libc::munmap(addr, len as usize) };
    if rc != 0 {
        return Err(err).context("mincore");
    }
    let pages = vec.iter().filter(|b| **b & 1 != 0).count() as u64;
    Ok((pages * page).min(len))
}

/// Bytes used on the filesystem holding `path` (statvfs).
fn fs_used(path: &Path) -> Result<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid C string and out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error()).context("statvfs");
    }
    Ok((st.f_blocks - st.f_bfree) * st.f_frsize)
}

/// `syncfs` of the filesystem holding `dir`; returns how long it took.
fn syncfs(dir: &Path) -> Result<Duration> {
    let f = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    let t0 = Instant::now();
    // SAFETY: plain syscall on an open descriptor.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("syncfs");
    }
    Ok(t0.elapsed())
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

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    v.retain(|p| p.is_file());
    v.sort();
    Ok(v)
}

fn clear_dir(dir: &Path) -> Result<()> {
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
struct CacheCheck {
    /// `/proc/meminfo` Cached before and after dropping (cold runs; equal for warm runs).
    cached_before_bytes: u64,
    cached_after_bytes: u64,
    /// Whether `3` was written to /proc/sys/vm/drop_caches.
    drop_caches: bool,
    /// Parent bytes in the page cache right before the run (mincore, all components).
    parent_resident_bytes: u64,
}

/// Empties the page cache of the parent (and of the loop image under it).
fn make_cold(parent_files: &[PathBuf], image: Option<&Path>) -> Result<CacheCheck> {
    // SAFETY: sync has no preconditions. Dirty pages cannot be dropped: write them first.
    unsafe { libc::sync() };
    for p in parent_files.iter().map(PathBuf::as_path).chain(image) {
        let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
        cleave::io::fs::drop_cache(&f, 0, 0);
    }
    let cached_before = meminfo_cached()?;
    let drop_caches = is_root() && std::fs::write("/proc/sys/vm/drop_caches", b"3").is_ok();
    let cached_after = meminfo_cached()?;
    Ok(CacheCheck {
        cached_before_bytes: cached_before,
        cached_after_bytes: cached_after,
        drop_caches,
        parent_resident_bytes: parent_resident(parent_files)?,
    })
}

fn parent_resident(parent_files: &[PathBuf]) -> Result<u64> {
    parent_files.iter().map(|p| resident_bytes(p)).sum()
}

// ---------------------------------------------------------------------------------------
// One run

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Fingerprint {
    count: u64,
    xor: String,
    sum: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Run {
    size_bytes: u64,
    partition_size: u64,
    content: Content,
    config: String,
    fs: Fs,
    cache: String,
    iteration: u32,
    /// Spawn to exit.
    process_wall_s: f64,
    /// syncfs of the output filesystem right after the exit.
    sync_s: f64,
    /// process_wall_s + sync_s: what the tables report as wall.
    wall_s: f64,
    cpu_user_s: f64,
    cpu_system_s: f64,
    read_bytes: u64,
    write_bytes: u64,
    rchar: u64,
    wchar: u64,
    peak_rss_bytes: u64,
    /// From the split's JSON (None for cp).
    bytes_shared: Option<u64>,
    bytes_copied: Option<u64>,
    bytes_reencoded: Option<u64>,
    children: usize,
    /// Children whose layout is not the one asked for, or that carry a fallback reason.
    children_fallback: Option<usize>,
    fallback_reasons: Vec<String>,
    /// Children's Data.db bytes in extents FIEMAP reports shared.
    fiemap_shared_bytes: u64,
    /// Growth of the output filesystem's used bytes over the run (after syncfs).
    space_used_bytes: i64,
    /// Outputs other than Data.db: the rebuilt components.
    rebuilt_component_bytes: u64,
    check_ok: Option<bool>,
    check_parent: Option<Fingerprint>,
    check_children: Option<Fingerprint>,
    /// The split's own /proc/self/io figures, for cross-checking.
    self_read_bytes: Option<u64>,
    self_write_bytes: Option<u64>,
    cache_check: CacheCheck,
}

impl Run {
    fn cpu_s(&self) -> f64 {
        self.cpu_user_s + self.cpu_system_s
    }
}

/// A generated parent on one filesystem.
struct Parent {
    data: PathBuf,
    files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ParentInfo {
    size_bytes: u64,
    partition_size: u64,
    content: Content,
    partitions: u64,
    data_length: u64,
    data_file_bytes: u64,
    chunk_length: u64,
    chunks: u64,
    /// Index.db + CompressionInfo.db + Statistics.db + Summary.db.
    index_side_bytes: u64,
    component_bytes: BTreeMap<String, u64>,
    gen_wall_s: f64,
    gen_cpu_s: f64,
    gen_mb_per_s: f64,
}

fn component_name(p: &Path) -> String {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.rsplit('-').next().unwrap_or(name).to_string()
}

fn fingerprint(v: &Value) -> Option<Fingerprint> {
    Some(Fingerprint {
        count: v.get("count")?.as_u64()?,
        xor: v.get("xor")?.as_str()?.to_string(),
        sum: v.get("sum")?.as_str()?.to_string(),
    })
}

struct RunCtx<'a> {
    exe: &'a Path,
    parts: usize,
    parent: &'a Parent,
    out: &'a Path,
    image: Option<&'a Path>,
    mount: Option<&'a Path>,
}

fn run_once(
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
    let used_before = fs_used(ctx.out)?;
    let cache_check = if cold {
        make_cold(&ctx.parent.files, ctx.image)?
    } else {
        let c = meminfo_cached()?;
        CacheCheck {
            cached_before_bytes: c,
            cached_after_bytes: c,
            drop_caches: false,
            parent_resident_bytes: parent_resident(&ctx.parent.files)?,
        }
    };
    let mut cmd;
    match config.tool {
        Tool::Split { layout, digest } => {
            cmd = Command::new(ctx.exe);
            cmd.arg("split")
                .arg(&ctx.parent.data)
                .arg("--out")
                .arg(ctx.out)
                .args(["--parts", &ctx.parts.to_string()])
                .args(["--layout", layout, "--digest", digest]);
            if layout == "padded" {
                cmd.args(["--target-data-access", "standard"]);
            }
            cmd.arg("--json");
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
    let m = measure(&mut cmd)?;
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
    let used_after = fs_used(ctx.out)?;
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

// ---------------------------------------------------------------------------------------
// Driving the sweep

struct Progress {
    t0: Instant,
}

impl Progress {
    fn say(&self, msg: impl std::fmt::Display) {
        let s = self.t0.elapsed().as_secs();
        eprintln!("[{:>3}:{:02}] {msg}", s / 60, s % 60);
    }
}

fn human(b: f64) -> String {
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

fn size_label(b: u64) -> String {
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

fn run_line(r: &Run) -> String {
    format!(
        "wall {:.2} s (sync {:.2}), CPU {:.2} s, read {}, written {}, RSS {}, shared {} copied {} re-encoded {}{}{}",
        r.wall_s,
        r.sync_s,
        r.cpu_s(),
        human(r.read_bytes as f64),
        human(r.write_bytes as f64),
        human(r.peak_rss_bytes as f64),
        r.bytes_shared.map_or("-".into(), |b| human(b as f64)),
        r.bytes_copied.map_or("-".into(), |b| human(b as f64)),
        r.bytes_reencoded.map_or("-".into(), |b| human(b as f64)),
        match r.check_ok {
            Some(true) => ", check ok",
            Some(false) => ", check MISMATCH",
            None => "",
        },
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

/// The loop device a mount point is on.
fn loop_device(mount_point: &Path) -> Option<String> {
    let out = Command::new("findmnt")
        .args(["-n", "-o", "SOURCE", "--mountpoint"])
        .arg(mount_point)
        .output()
        .ok()?;
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    dev.starts_with("/dev/loop").then_some(dev)
}

/// Switches the loop device to direct I/O, so that the image's pages are not cached a
/// second time by the host filesystem.
fn loop_direct_io(dev: Option<&str>) -> bool {
    dev.is_some_and(|dev| {
        Command::new("losetup")
            .args(["--direct-io=on", dev])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Sets a block device's readahead (512-byte sectors) and puts the old value back on drop.
struct Readahead {
    dev: String,
    old: u64,
}

impl Readahead {
    fn set(dev: &str, sectors: u64) -> Result<Readahead> {
        let out = Command::new("blockdev")
            .args(["--getra", dev])
            .output()
            .context("blockdev --getra")?;
        let old: u64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .with_context(|| format!("blockdev --getra {dev}"))?;
        let ok = Command::new("blockdev")
            .args(["--setra", &sectors.to_string(), dev])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            bail!("blockdev --setra {sectors} {dev} failed");
        }
        Ok(Readahead {
            dev: dev.to_string(),
            old,
        })
    }
}

impl Drop for Readahead {
    fn drop(&mut self) {
        let _ = Command::new("blockdev")
            .args(["--setra", &self.old.to_string(), &self.dev])
            .status();
    }
}

struct FixtureResult {
    info: ParentInfo,
    runs: Vec<Run>,
}

#[allow(clippy::too_many_arguments)]
fn run_fixture(
    a: &SplitBenchArgs,
    exe: &Path,
    scratch: &Path,
    fx: &Fixture,
    progress: &Progress,
    loop_dio: &mut bool,
) -> Result<FixtureResult> {
    // Parent + the largest set of outputs (a full copy) + slack; sparse, so only what is
    // written takes space on the disk.
    let on_disk_guess = match fx.content {
        Content::Compressible => fx.size / 2 + fx.size / 8,
        Content::Random => fx.size + fx.size / 16,
    };
    let image_size = (2 * on_disk_guess + 2 * GIB).next_multiple_of(MIB);
    progress.say(format_args!(
        "{}: {} parent, {} partitions, {:?}: mounting a {} XFS (reflink=1) loop image",
        fx.role,
        size_label(fx.size),
        size_label(fx.partition_size),
        fx.content,
        size_label(image_size)
    ));
    let mount = LoopMount::new(scratch, image_size, "xfs")
        .with_context(|| format!("creating a loop XFS under {}", scratch.display()))?;
    let mnt = mount.mount_point.clone();
    let dev = loop_device(&mnt);
    *loop_dio = loop_direct_io(dev.as_deref());
    let image = mnt.parent().map(|d| d.join("fs.img"));
    let parent_dir = mnt.join("parent");
    let out_xfs = mnt.join("out");
    std::fs::create_dir_all(&parent_dir)?;
    std::fs::create_dir_all(&out_xfs)?;

    progress.say(format_args!("{}: generating the parent", fx.role));
    let mut gen = Command::new(exe);
    gen.arg("gen")
        .arg("--out")
        .arg(&parent_dir)
        .args(["--size", &fx.size.to_string()])
        .args(["--partition-size", &fx.partition_size.to_string()])
        .args(["--row-size", &a.row_size.to_string()])
        .args(["--chunk", &a.chunk.to_string()])
        .args(["--version", &a.version])
        .arg(match fx.content {
            Content::Compressible => "--compressible",
            Content::Random => "--random",
        })
        .arg("--json");
    let g = measure(&mut gen)?;
    if g.exit_code != Some(0) {
        bail!("cleave gen failed: {}", g.stderr.trim());
    }
    syncfs(&parent_dir)?;
    let gj: Value = serde_json::from_slice(&g.stdout).context("parsing cleave gen --json")?;
    let gu = |k: &str| {
        gj.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| anyhow!("cleave gen --json: no {k}"))
    };
    let data = PathBuf::from(
        gj.get("data")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("cleave gen --json: no data"))?,
    );
    let files = files_in(&parent_dir)?;
    let mut component_bytes = BTreeMap::new();
    for f in &files {
        component_bytes.insert(component_name(f), std::fs::metadata(f)?.len());
    }
    let index_side_bytes = [
        "Index.db",
        "CompressionInfo.db",
        "Statistics.db",
        "Summary.db",
    ]
    .iter()
    .map(|c| component_bytes.get(*c).copied().unwrap_or(0))
    .sum();
    let data_length = gu("data_length")?;
    let gen_wall = g.wall.as_secs_f64();
    let info = ParentInfo {
        size_bytes: fx.size,
        partition_size: fx.partition_size,
        content: fx.content,
        partitions: gu("partitions")?,
        data_length,
        data_file_bytes: gu("data_file_bytes")?,
        chunk_length: a.chunk,
        chunks: data_length.div_ceil(a.chunk),
        index_side_bytes,
        component_bytes,
        gen_wall_s: gen_wall,
        gen_cpu_s: (g.user + g.system).as_secs_f64(),
        gen_mb_per_s: data_length as f64 / 1e6 / gen_wall,
    };
    progress.say(format_args!(
        "{}: parent {} partitions, Data.db {} ({} uncompressed), index side {}; gen {:.1} s ({:.0} MB/s)",
        fx.role,
        info.partitions,
        human(info.data_file_bytes as f64),
        human(info.data_length as f64),
        human(info.index_side_bytes as f64),
        gen_wall,
        info.gen_mb_per_s
    ));
    let xfs_parent = Parent {
        data: data.clone(),
        files: files.clone(),
    };

    // The same parent on the plain disk, for `copy` there.
    let plain = if fx.needs_plain_copy() {
        let dir = ScratchDir::new(Some(scratch))?;
        let pdir = dir.path().join("parent");
        let odir = dir.path().join("out");
        std::fs::create_dir_all(&pdir)?;
        std::fs::create_dir_all(&odir)?;
        progress.say(format_args!(
            "{}: copying the parent to the plain disk",
            fx.role
        ));
        let mut pfiles = Vec::new();
        for f in &files {
            let to = pdir.join(f.file_name().context("file name")?);
            std::fs::copy(f, &to)
                .with_context(|| format!("copying {} to {}", f.display(), to.display()))?;
            pfiles.push(to);
        }
        syncfs(&pdir)?;
        let pdata = pdir.join(data.file_name().context("file name")?);
        Some((
            dir,
            Parent {
                data: pdata,
                files: pfiles,
            },
            odir,
        ))
    } else {
        None
    };

    let xfs_ctx = RunCtx {
        exe,
        parts: a.parts,
        parent: &xfs_parent,
        out: &out_xfs,
        image: image.as_deref().filter(|p| p.exists()),
        mount: Some(&mnt),
    };
    let plain_ctx = plain.as_ref().map(|(_, p, o)| RunCtx {
        exe,
        parts: a.parts,
        parent: p,
        out: o,
        image: None,
        mount: None,
    });
    let ctx_for = |c: &Config| -> Result<&RunCtx> {
        match c.fs {
            Fs::Xfs => Ok(&xfs_ctx),
            Fs::Plain => plain_ctx
                .as_ref()
                .ok_or_else(|| anyhow!("no plain-disk parent")),
        }
    };

    let n = a.common.iterations;
    let mut runs = Vec::new();
    for it in 1..=n {
        for c in &fx.configs {
            let r = run_once(ctx_for(c)?, fx, c, true, it)?;
            progress.say(format_args!(
                "{} {} | {} cold {it}/{n}: {}",
                fx.role,
                size_label(fx.size),
                c.name,
                run_line(&r)
            ));
            runs.push(r);
        }
    }
    for c in &fx.warm {
        let ctx = ctx_for(c)?;
        // One untimed pass brings the parent's pages in.
        let _ = run_once(ctx, fx, c, false, 0)?;
        for it in 1..=n {
            let r = run_once(ctx, fx, c, false, it)?;
            progress.say(format_args!(
                "{} {} | {} warm {it}/{n}: {}",
                fx.role,
                size_label(fx.size),
                c.name,
                run_line(&r)
            ));
            runs.push(r);
        }
    }
    if !fx.no_readahead.is_empty() {
        let dev = dev
            .as_deref()
            .ok_or_else(|| anyhow!("no loop device for {}", mnt.display()))?;
        // One run: without readahead every page is a synchronous read (tens of seconds).
        let ra = Readahead::set(dev, 0)?;
        for c in &fx.no_readahead {
            let r = run_once(ctx_for(c)?, fx, c, true, 1)?;
            progress.say(format_args!(
                "{} {} | {} cold 1/1: {}",
                fx.role,
                size_label(fx.size),
                c.name,
                run_line(&r)
            ));
            runs.push(r);
        }
        drop(ra);
    }
    drop(plain);
    drop(mount);
    Ok(FixtureResult { info, runs })
}

// ---------------------------------------------------------------------------------------
// Aggregation

#[derive(Debug, Clone, Serialize)]
struct Row {
    size_bytes: u64,
    partition_size: u64,
    content: Content,
    config: String,
    fs: Fs,
    cache: String,
    runs: usize,
    wall_s: Stat,
    process_wall_s: Stat,
    cpu_s: Stat,
    read_bytes: Stat,
    write_bytes: Stat,
    peak_rss_bytes: Stat,
    bytes_shared: Option<f64>,
    bytes_copied: Option<f64>,
    bytes_reencoded: Option<f64>,
    fiemap_shared_bytes: f64,
    space_used_bytes: f64,
    rebuilt_component_bytes: f64,
    children: usize,
    children_fallback: Option<usize>,
    fallback_reasons: Vec<String>,
    /// "ok" when every run's children matched the parent, "n/a" for cp.
    check: String,
    parent_resident_bytes_max: f64,
}

fn aggregate(runs: &[Run]) -> Vec<Row> {
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
                cpu_s: stat(&|r| r.cpu_s()),
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
                fallback_reasons: reasons,
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
    name: String,
    measured: String,
    limit: String,
    holds: Option<bool>,
    /// How far from the limit (a miss says by how much).
    margin: String,
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

struct Report<'a> {
    parents: &'a [ParentInfo],
    runs: &'a [Run],
    rows: &'a [Row],
    largest: u64,
    a: &'a SplitBenchArgs,
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

    /// CPU seconds of `aligned, no digest` as fixed + b × partitions + c × chunks, solved
    /// through three cold runs: the smallest and the largest size, and the largest size with
    /// wide partitions.
    fn cpu_fit(&self, smallest: u64) -> Option<(f64, f64, f64)> {
        let a = self.a;
        let point = |size: u64, ps: u64| {
            let r = self.row(size, ps, Content::Compressible, ALIGNED.name, "cold")?;
            let p = self.parent(size, ps, Content::Compressible)?;
            Some([1.0, p.partitions as f64, p.chunks as f64, r.cpu_s.median])
        };
        let m = [
            point(smallest, a.partition_size)?,
            point(self.largest, a.partition_size)?,
            point(self.largest, a.wide_partition_size)?,
        ];
        // Cramer's rule; column 3 is the right-hand side.
        let det = |c: [usize; 3]| {
            let e = |i: usize, j: usize| m[i][c[j]];
            e(0, 0) * (e(1, 1) * e(2, 2) - e(1, 2) * e(2, 1))
                - e(0, 1) * (e(1, 0) * e(2, 2) - e(1, 2) * e(2, 0))
                + e(0, 2) * (e(1, 0) * e(2, 1) - e(1, 1) * e(2, 0))
        };
        let d = det([0, 1, 2]);
        if d.abs() < 1e-9 {
            return None;
        }
        Some((det([3, 1, 2]) / d, det([0, 3, 2]) / d, det([0, 1, 3]) / d))
    }

    fn targets(&self) -> Vec<Target> {
        let mut t = Vec::new();
        let Some(parent) = self.parent(self.largest, self.a.partition_size, Content::Compressible)
        else {
            return t;
        };
        let hb = |b: f64| human(b);
        if let Some(al) = self.main_row(ALIGNED.name) {
            t.push(ratio_target(
                "aligned, no digest: bytes read ≤ 1.2 × (Index + CompressionInfo + Statistics + Summary)",
                al.read_bytes.median,
                1.2 * parent.index_side_bytes as f64,
                &hb,
            ));
            let floor =
                al.rebuilt_component_bytes + (al.children as u64 * parent.chunk_length) as f64;
            t.push(ratio_target(
                "aligned, no digest: bytes written ≤ 1.2 × (rebuilt components + one chunk per child)",
                al.write_bytes.median,
                1.2 * floor,
                &hb,
            ));
            t.push(ratio_target(
                "aligned, no digest: peak RSS ≤ 64 MiB",
                al.peak_rss_bytes.median,
                64.0 * MIB as f64,
                &hb,
            ));
            if let Some(rg) = self.main_row(REGRID.name) {
                t.push(speedup_target(
                    "aligned, no digest: wall ≥ 300× below regrid",
                    rg.wall_s.median,
                    al.wall_s.median,
                    300.0,
                ));
            }
            if let Some(cp) = self.main_row(CP.name) {
                t.push(speedup_target(
                    "aligned, no digest: wall ≥ 100× below cp of the parent Data.db",
                    cp.wall_s.median,
                    al.wall_s.median,
                    100.0,
                ));
            }
            let wide = self.a.wide_partition_size;
            if let (Some(w), Some(wp)) = (
                self.row(
                    self.largest,
                    wide,
                    Content::Compressible,
                    ALIGNED.name,
                    "cold",
                ),
                self.parent(self.largest, wide, Content::Compressible),
            ) {
                let pr = parent.partitions as f64 / wp.partitions as f64;
                let wr = al.wall_s.median / w.wall_s.median;
                let cr = al.cpu_s.median / w.cpu_s.median;
                t.push(Target {
                    name: format!(
                        "aligned, no digest: wall and CPU grow with partition count, not bytes ({} vs {} partitions of the same {})",
                        size_label(self.a.partition_size),
                        size_label(wide),
                        size_label(self.largest)
                    ),
                    measured: format!(
                        "{pr:.0}× the partitions: wall {wr:.1}×, CPU {cr:.1}× ({:.3} s vs {:.3} s wall, {:.3} s vs {:.3} s CPU)",
                        al.wall_s.median, w.wall_s.median, al.cpu_s.median, w.cpu_s.median
                    ),
                    limit: "wall and CPU fall with the partition count at equal bytes".into(),
                    holds: match (wr > 1.5, cr > 1.5) {
                        (true, true) => Some(true),
                        (false, false) => Some(false),
                        _ => None,
                    },
                    margin: format!(
                        "wall per partition {:.1} µs vs {:.1} µs",
                        al.wall_s.median / parent.partitions as f64 * 1e6,
                        w.wall_s.median / wp.partitions as f64 * 1e6
                    ),
                });
            }
        }
        if let Some(cb) = self.main_row(DIGEST_COMBINE.name) {
            t.push(ratio_target(
                "aligned + digest combine: bytes read ≤ chunk count × 4 KiB",
                cb.read_bytes.median,
                (parent.chunks * 4096) as f64,
                &hb,
            ));
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
fiemap_shared_bytes,space_used_bytes,children,children_fallback,check\n",
    );
    let o = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.0}"));
    for r in rows {
        let p = parents.iter().find(|p| {
            p.size_bytes == r.size_bytes
                && p.partition_size == r.partition_size
                && p.content == r.content
        });
        s.push_str(&format!(
            "{},{},{},{},{},\"{}\",{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{},{},{},{:.0},{:.0},{},{},{}\n",
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
            a.common.iterations
        ));
    }
    s.push_str("| configuration | filesystem | wall | CPU user+sys | read | written | peak RSS | shared | copied | re-encoded | check |\n");
    s.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for c in MAIN {
        if let Some(r) = rep.main_row(c.name) {
            s.push_str(&format!(
                "| {} | {} | {} | {:.2} s | {} | {} | {} | {} | {} | {} | {} |\n",
                r.config,
                match r.fs {
                    Fs::Xfs => "XFS loop",
                    Fs::Plain => "plain disk",
                },
                secs_show(&r.wall_s),
                r.cpu_s.median,
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
    if let (Some(n), Some(w)) = (
        rep.row(
            largest,
            a.partition_size,
            Content::Compressible,
            ALIGNED.name,
            "cold",
        ),
        rep.row(largest, wide, Content::Compressible, ALIGNED.name, "cold"),
    ) {
        s.push_str(&format!(
            "### Partition count, not bytes: aligned, no digest, {} parent\n\n| partition size | partitions | Index.db | wall | CPU | read | written | peak RSS |\n|--:|--:|--:|--:|--:|--:|--:|--:|\n",
            size_label(largest)
        ));
        for (r, ps) in [(n, a.partition_size), (w, wide)] {
            let p = rep.parent(largest, ps, Content::Compressible);
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

    // CPU = fixed + per partition + per chunk, from three runs of aligned, no digest.
    let smallest = rep
        .parents
        .iter()
        .filter(|p| p.content == Content::Compressible && p.partition_size == a.partition_size)
        .map(|p| p.size_bytes)
        .min();
    if let Some(fit) = smallest.and_then(|small| rep.cpu_fit(small)) {
        s.push_str(&format!(
            "CPU of `aligned, no digest` fitted to fixed + per partition + per chunk through three runs \
({} and {} of {} partitions, {} of {} partitions): {:.0} ms + {:.2} µs a partition + {:.3} µs a chunk.\n\n",
            size_label(smallest.unwrap_or(0)),
            size_label(largest),
            size_label(a.partition_size),
            size_label(largest),
            size_label(wide),
            fit.0 * 1e3,
            fit.1 * 1e6,
            fit.2 * 1e6
        ));
    }

    // aligned by size
    s.push_str("### `aligned, no digest` by parent size, cold\n\n| parent | partitions | chunks | Index side | wall | CPU | read | written | peak RSS |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    let mut by_size: Vec<&Row> = rep
        .rows
        .iter()
        .filter(|r| {
            r.config == ALIGNED.name
                && r.cache == "cold"
                && r.content == Content::Compressible
                && r.partition_size == a.partition_size
        })
        .collect();
    by_size.sort_by_key(|r| r.size_bytes);
    for r in by_size {
        if let Some(p) = rep.parent(r.size_bytes, r.partition_size, r.content) {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.3} s | {} | {} | {} |\n",
                size_label(r.size_bytes),
                p.partitions,
                p.chunks,
                human(p.index_side_bytes as f64),
                secs_show(&r.wall_s),
                r.cpu_s.median,
                human(r.read_bytes.median),
                human(r.write_bytes.median),
                human(r.peak_rss_bytes.median)
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
        s.push_str("### Incompressible data (`gen --random`)\n\n| parent | configuration | children fell back | bytes shared | bytes copied | bytes re-encoded | wall | read | written | fallback |\n|---|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
        for r in random {
            let p = rep.parent(r.size_bytes, r.partition_size, r.content);
            s.push_str(&format!(
                "| {} ({} on disk) | {} | {} of {} | {} | {} | {} | {} | {} | {} | {} |\n",
                size_label(r.size_bytes),
                human(p.map_or(0, |p| p.data_file_bytes) as f64),
                r.config,
                r.children_fallback.unwrap_or(0),
                r.children,
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

/// A configuration's points: (parent GiB, wall s, written MiB).
type Series = (&'static str, Vec<(f64, f64, f64)>);

/// Wall time and bytes written against parent size, log–log, one line per configuration.
fn plot(path: &Path, rep: &Report) -> Result<()> {
    use plotters::prelude::*;
    let a = rep.a;
    let series: Vec<Series> = MAIN
        .iter()
        .map(|c| {
            let mut pts: Vec<(f64, f64, f64)> = rep
                .rows
                .iter()
                .filter(|r| {
                    r.config == c.name
                        && r.cache == "cold"
                        && r.partition_size == a.partition_size
                        && r.content == Content::Compressible
                })
                .map(|r| {
                    (
                        r.size_bytes as f64 / GIB as f64,
                        r.wall_s.median,
                        r.write_bytes.median / MIB as f64,
                    )
                })
                .collect();
            pts.sort_by(|x, y| x.0.total_cmp(&y.0));
            (c.name, pts)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect();
    if series.is_empty() {
        return Ok(());
    }
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (mut xmin, mut xmax) = (f64::MAX, f64::MIN);
    let (mut wmin, mut wmax, mut bmax) = (f64::MAX, f64::MIN, f64::MIN);
    for &(x, w, b) in all {
        xmin = xmin.min(x);
        xmax = xmax.max(x);
        wmin = wmin.min(w.max(1e-3));
        wmax = wmax.max(w);
        bmax = bmax.max(b);
    }
    // Bytes written of 0 (a pure reflink) would be -inf on a log axis: floor at 4 KiB.
    const BYTES_FLOOR_MIB: f64 = 4.0 / 1024.0;
    let err = |e: &dyn std::fmt::Debug| anyhow!("drawing {}: {e:?}", path.display());
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(
            &format!(
                "cleave bench split: {}-way split, {} partitions, cold cache, XFS loop (2-core VM); median of {}",
                a.parts,
                size_label(a.partition_size),
                a.common.iterations
            ),
            ("sans-serif", 18),
        )
        .map_err(|e| err(&e))?;
    let (charts, legend) = root.split_horizontally(1040);
    let (left, right) = charts.split_horizontally(520);
    let colors = [
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x8c, 0x56, 0x4b),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x17, 0xbe, 0xcf),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0xbc, 0xbd, 0x22),
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0x7f, 0x7f, 0x7f),
    ];
    let xr = (xmin / 1.3)..(xmax * 1.3);
    for (panel, area) in [(0, &left), (1, &right)] {
        let (ylo, yhi, desc, caption) = if panel == 0 {
            (wmin / 2.0, wmax * 2.0, "wall (s)", "wall time")
        } else {
            (
                BYTES_FLOOR_MIB / 2.0,
                bmax * 2.0,
                "written at the device (MiB)",
                "bytes written",
            )
        };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xr.clone().log_scale(), (ylo..yhi).log_scale())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("parent size (GiB, uncompressed Data.db)")
            .y_desc(desc)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| {
                if *y >= 1.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y:.3}")
                }
            })
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (_, pts)) in series.iter().enumerate() {
            let color = colors[i % colors.len()];
            let data: Vec<(f64, f64)> = pts
                .iter()
                .map(|&(x, w, b)| {
                    (
                        x,
                        if panel == 0 {
                            w.max(1e-3)
                        } else {
                            b.max(BYTES_FLOOR_MIB)
                        },
                    )
                })
                .collect();
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?;
            chart
                .draw_series(data.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
    }
    // One legend for both panels, beside them.
    for (i, (name, _)) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        let y = 80 + 24 * i as i32;
        legend
            .draw(&PathElement::new(
                vec![(8, y), (34, y)],
                color.stroke_width(3),
            ))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(*name, (42, y - 7), ("sans-serif", 13)))
            .map_err(|e| err(&e))?;
    }
    let y = 80 + 24 * series.len() as i32 + 10;
    for (k, line) in [
        "0 bytes written (a pure reflink)",
        "is drawn at 4 KiB.",
        "Wall includes a syncfs of the",
        "output filesystem after exit.",
    ]
    .iter()
    .enumerate()
    {
        legend
            .draw(&Text::new(
                *line,
                (8, y + 16 * k as i32),
                ("sans-serif", 12),
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

fn environment(scratch: &Path, loop_dio: bool) -> Value {
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
        "drop_caches": is_root(),
        "cp": Command::new("cp").arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").to_string()).unwrap_or_default(),
    })
}

#[derive(Serialize)]
struct JsonReport<'a> {
    benchmark: &'static str,
    environment: Value,
    iterations: u32,
    parts: usize,
    parents: &'a [ParentInfo],
    rows: &'a [Row],
    targets: Vec<Target>,
    runs: &'a [Run],
}

pub fn run(a: SplitBenchArgs) -> Result<ExitCode> {
    let progress = Progress { t0: Instant::now() };
    if let Some(path) = a.from_json.clone() {
        return from_json(a, &path, &progress);
    }
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
    let smallest = sizes[0];

    let mut fixtures: Vec<Fixture> = sizes
        .iter()
        .map(|&size| Fixture {
            size,
            partition_size: a.partition_size,
            content: Content::Compressible,
            configs: MAIN.to_vec(),
            warm: if size == largest && !a.no_warm {
                WARM.to_vec()
            } else {
                Vec::new()
            },
            no_readahead: if size == smallest && !a.no_warm {
                vec![COMBINE_RA0]
            } else {
                Vec::new()
            },
            role: "sweep",
        })
        .collect();
    if a.wide_partition_size > 0 && a.wide_partition_size != a.partition_size {
        fixtures.push(Fixture {
            size: largest,
            partition_size: a.wide_partition_size,
            content: Content::Compressible,
            configs: vec![ALIGNED],
            warm: Vec::new(),
            no_readahead: Vec::new(),
            role: "wide partitions",
        });
    }
    let random_size = a.random_size.unwrap_or(largest);
    if random_size > 0 {
        fixtures.push(Fixture {
            size: random_size,
            partition_size: a.partition_size,
            content: Content::Random,
            configs: vec![ALIGNED],
            warm: Vec::new(),
            no_readahead: Vec::new(),
            role: "incompressible",
        });
    }

    let scratch = ScratchDir::new(a.common.dir.as_deref())?;
    progress.say(format_args!(
        "scratch {} ({} fixtures, {} iteration(s))",
        scratch.path().display(),
        fixtures.len(),
        a.common.iterations
    ));
    let mut parents = Vec::new();
    let mut runs = Vec::new();
    let mut loop_dio = false;
    for fx in &fixtures {
        let r = run_fixture(&a, &exe, scratch.path(), fx, &progress, &mut loop_dio)?;
        parents.push(r.info);
        runs.extend(r.runs);
    }
    let env = environment(scratch.path(), loop_dio);
    drop(scratch);
    emit(&a, &parents, &runs, env, largest, &progress)?;
    progress.say("done");
    Ok(ExitCode::SUCCESS)
}

/// What `--from-json` reads back from a previous run's split.json (rows and targets are
/// recomputed).
#[derive(Deserialize)]
struct Saved {
    environment: Value,
    iterations: u32,
    parts: usize,
    parents: Vec<ParentInfo>,
    runs: Vec<Run>,
}

fn from_json(mut a: SplitBenchArgs, path: &Path, progress: &Progress) -> Result<ExitCode> {
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
    a.common.iterations = saved.iterations;
    a.parts = saved.parts;
    emit(
        &a,
        &saved.parents,
        &saved.runs,
        saved.environment,
        largest,
        progress,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the report files and prints the tables (or the JSON).
fn emit(
    a: &SplitBenchArgs,
    parents: &[ParentInfo],
    runs: &[Run],
    env: Value,
    largest: u64,
    progress: &Progress,
) -> Result<()> {
    let rows = aggregate(runs);
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
        iterations: a.common.iterations,
        parts: a.parts,
        parents,
        rows: &rows,
        targets: rep.targets(),
        runs,
    };
    if let Some(dir) = &a.report_dir {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("split.csv"), csv(&rows, parents))?;
        std::fs::write(
            dir.join("split.json"),
            serde_json::to_string_pretty(&json)? + "\n",
        )?;
        std::fs::write(dir.join("split.md"), &md)?;
        plot(&dir.join("split.svg"), &rep)?;
        progress.say(format_args!(
            "wrote split.csv, split.json, split.md, split.svg in {}",
            dir.display()
        ));
    }
    if a.common.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{md}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_gib_or_units() {
        assert_eq!(parse_gib("1"), Ok(GIB));
        assert_eq!(parse_gib("0.5"), Ok(GIB / 2));
        assert_eq!(parse_gib("512MiB"), Ok(512 * MIB));
        assert!(parse_gib("x").is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(size_label(16 * GIB), "16 GiB");
        assert_eq!(size_label(64 * 1024), "64 KiB");
        assert_eq!(human(1.5 * GIB as f64), "1.50 GiB");
        assert_eq!(human(57.0 * MIB as f64), "57.0 MiB");
        assert_eq!(component_name(Path::new("/x/nb-1-big-Data.db")), "Data.db");
    }

    #[test]
    fn measures_a_child() {
        let m = measure(Command::new("sh").args(["-c", "echo hi; echo err >&2"])).unwrap();
        assert_eq!(m.exit_code, Some(0));
        assert_eq!(m.stdout, b"hi\n");
        assert_eq!(m.stderr.trim(), "err");
        assert!(m.peak_rss_bytes > 0);
        let m = measure(&mut Command::new("false")).unwrap();
        assert_eq!(m.exit_code, Some(1));
    }

    #[test]
    fn resident_bytes_of_a_fresh_file() {
        let dir = ScratchDir::new(None).unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 100_000]).unwrap();
        // Just written: resident (up to the page rounding of the last page).
        assert_eq!(resident_bytes(&p).unwrap(), 100_000);
        let e = dir.path().join("e");
        std::fs::write(&e, b"").unwrap();
        assert_eq!(resident_bytes(&e).unwrap(), 0);
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

//! Process self-measurement for benchmarks and diagnostics (Linux).
//!
//! * peak resident set size: `VmHWM` in `/proc/self/status`, reset to the current RSS by
//!   writing `5` to `/proc/self/clear_refs` (Linux 4.0+, `Documentation/filesystems/proc.rst`);
//! * I/O counters: `/proc/self/io` (`rchar` counts bytes through `read(2)` and friends,
//!   `read_bytes` only those the block layer fetched, so a warm page cache reads 0);
//! * CPU time: `getrusage(RUSAGE_SELF)`, user and system, all threads;
//! * device flushes: "flushes completed" of a block device in `/proc/diskstats` (field 16,
//!   Linux 5.5+, `Documentation/admin-guide/iostats.rst`), of the device a filesystem is on
//!   and, for a loop device, of the device its backing file is on.
//!
//! Everything returns `std::io::Result`: `/proc` may be missing or restricted (non-Linux,
//! some sandboxes), and the caller decides whether that is fatal.

use std::io::{Error, ErrorKind, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

const STATUS: &str = "/proc/self/status";
const CLEAR_REFS: &str = "/proc/self/clear_refs";
const IO: &str = "/proc/self/io";

/// Whether this process runs as root (effective uid 0): drop_caches and loop mounts need it.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Peak resident set size of this process in bytes (`VmHWM`).
pub fn peak_rss() -> Result<u64> {
    status_kb("VmHWM")
}

/// Current resident set size of this process in bytes (`VmRSS`).
pub fn current_rss() -> Result<u64> {
    status_kb("VmRSS")
}

/// Resets the peak RSS (`VmHWM`) to the current RSS, so that a later [`peak_rss`] measures
/// only what happened in between. See also [`trim_heap`].
pub fn reset_peak_rss() -> Result<()> {
    std::fs::write(CLEAR_REFS, b"5")
}

/// Returns freed heap memory to the kernel (glibc `malloc_trim(0)`; a no-op elsewhere).
///
/// glibc keeps freed memory resident and raises its mmap threshold after a large free, so
/// a buffer allocated, freed and allocated again would not show in a later peak RSS
/// measurement. Trimming before [`reset_peak_rss`] makes each measured span pay for its
/// own allocations.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory the allocator already considers free.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn status_kb(field: &str) -> Result<u64> {
    let text = std::fs::read_to_string(STATUS)?;
    parse_status_kb(&text, field)
        .map(|kb| kb * 1024)
        .ok_or_else(|| bad(format!("no {field} in {STATUS}")))
}

/// The value of a `Name:   1234 kB` line of `/proc/<pid>/status`, in kB.
pub fn parse_status_kb(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let mut words = rest.split_whitespace();
        let value = words.next()?.parse().ok()?;
        (words.next() == Some("kB")).then_some(value)
    })
}

/// Cumulative I/O counters of this process (`/proc/self/io`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCounters {
    /// Bytes returned by `read(2)`-like calls, page cache hits included.
    pub rchar: u64,
    /// Bytes passed to `write(2)`-like calls.
    pub wchar: u64,
    /// Bytes the block layer fetched from storage for this process.
    pub read_bytes: u64,
    /// Bytes this process caused to be sent to storage.
    pub write_bytes: u64,
}

impl IoCounters {
    /// Counters accumulated since `earlier` (saturating, so never negative).
    pub fn since(&self, earlier: &IoCounters) -> IoCounters {
        IoCounters {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
        }
    }
}

pub fn io_counters() -> Result<IoCounters> {
    let text = std::fs::read_to_string(IO)?;
    parse_io(&text).ok_or_else(|| bad(format!("unexpected contents of {IO}")))
}

/// Parses `/proc/<pid>/io` (`name: value` lines).
pub fn parse_io(text: &str) -> Option<IoCounters> {
    let get = |name: &str| {
        text.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == name).then(|| v.trim().parse::<u64>().ok())?
        })
    };
    Some(IoCounters {
        rchar: get("rchar")?,
        wchar: get("wchar")?,
        read_bytes: get("read_bytes")?,
        write_bytes: get("write_bytes")?,
    })
}

/// CPU time consumed by this process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTime {
    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    /// CPU time spent since `earlier` (saturating).
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

/// `getrusage(RUSAGE_SELF)`: user and system CPU time of all threads of this process.
pub fn cpu_time() -> Result<CpuTime> {
    // SAFETY: `rusage` is plain old data, so all-zero is a valid value, and getrusage
    // only writes through the pointer, which is valid for the duration of the call.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return Err(Error::last_os_error());
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok(CpuTime {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
    })
}

const DISKSTATS: &str = "/proc/diskstats";

/// A block device by number (`st_dev` of a file on it, split as `major(3)`/`minor(3)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockDevice {
    pub major: u32,
    pub minor: u32,
}

impl BlockDevice {
    /// The device the filesystem holding `path` is on.
    pub fn of(path: &std::path::Path) -> Result<BlockDevice> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(path)?.dev();
        Ok(BlockDevice {
            major: libc::major(dev),
            minor: libc::minor(dev),
        })
    }

    /// For a loop device, the device its backing file is on
    /// (`/sys/dev/block/M:m/loop/backing_file`); `None` for any other device.
    pub fn loop_backing(self) -> Option<BlockDevice> {
        let p = format!(
            "/sys/dev/block/{}:{}/loop/backing_file",
            self.major, self.minor
        );
        let file = std::fs::read_to_string(p).ok()?;
        BlockDevice::of(std::path::Path::new(file.trim_end_matches('\n'))).ok()
    }

    /// Flush requests this device completed since boot (`/proc/diskstats`); `None` when the
    /// device is not listed (a filesystem without a block device) or the kernel is older
    /// than 5.5.
    pub fn flushes_completed(self) -> Result<Option<u64>> {
        Ok(parse_flushes(&std::fs::read_to_string(DISKSTATS)?, self))
    }
}

/// "flushes completed successfully" of `dev` in the text of `/proc/diskstats`: major, minor,
/// name, then the 17 fields of `iostats.rst`: 1–4 reads, 5–8 writes, 9–11 in flight and
/// times, 12–15 discards, 16 flushes completed, 17 time flushing.
pub fn parse_flushes(diskstats: &str, dev: BlockDevice) -> Option<u64> {
    diskstats.lines().find_map(|line| {
        let w: Vec<&str> = line.split_whitespace().collect();
        let major: u32 = w.first()?.parse().ok()?;
        let minor: u32 = w.get(1)?.parse().ok()?;
        if (major, minor) != (dev.major, dev.minor) {
            return None;
        }
        w.get(3 + 15)?.parse().ok()
    })
}

fn bad(msg: String) -> Error {
    Error::new(ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_lines() {
        let s = "Name:\tcleave\nVmPeak:\t  20000 kB\nVmHWM:\t    1972 kB\nVmRSS:\t    1900 kB\nThreads:\t1\n";
        assert_eq!(parse_status_kb(s, "VmHWM"), Some(1972));
        assert_eq!(parse_status_kb(s, "VmRSS"), Some(1900));
        assert_eq!(parse_status_kb(s, "VmSwap"), None);
        // A field that is a prefix of another is not confused with it.
        assert_eq!(parse_status_kb(s, "Vm"), None);
        assert_eq!(parse_status_kb(s, "Threads"), None);
    }

    #[test]
    fn parses_io() {
        let s = "rchar: 6976\nwchar: 5\nsyscr: 10\nsyscw: 0\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n";
        let io = parse_io(s).unwrap();
        assert_eq!(
            io,
            IoCounters {
                rchar: 6976,
                wchar: 5,
                read_bytes: 4096,
                write_bytes: 0
            }
        );
        assert_eq!(io.since(&io), IoCounters::default());
        assert_eq!(parse_io("rchar: 1\n"), None);
    }

    #[test]
    fn parses_flushes_completed() {
        let s = "   7       0 loop0 1 0 8 0 0 0 0 0 0 4 0 0 0 0 9 3 7\n 254       0 vda 31711 6608 2862650 19751 10965 32728 2890552 24180 0 12668 46863 4390 106 229728 1801 2414 1129\n 254       1 vda1 1 2 3\n";
        let dev = |major, minor| BlockDevice { major, minor };
        // Field 16; field 15 (time discarding, 1801 and 9 here) is the one before it.
        assert_eq!(parse_flushes(s, dev(254, 0)), Some(2414));
        assert_eq!(parse_flushes(s, dev(7, 0)), Some(3));
        // A kernel before 5.5 lists no flush fields.
        assert_eq!(parse_flushes(s, dev(254, 1)), None);
        assert_eq!(parse_flushes(s, dev(8, 0)), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        // Only what every Linux /proc offers; clear_refs and /proc/self/io may be
        // restricted in sandboxes, so they are exercised by `cleave bench` instead.
        let rss = current_rss().unwrap();
        assert!(rss > 0);
        assert!(peak_rss().unwrap() >= rss);
        let a = cpu_time().unwrap();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        std::hint::black_box(x);
        assert!(cpu_time().unwrap().total() >= a.total());
    }
}

/// `PROC_PID_INIT_INO` (include/linux/proc_ns.h): the inode of the initial PID namespace,
/// what `/proc/self/ns/pid` links to on the host or in a `hostPID` pod.
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// Whether this process can see every process that might hold a table's files, which is
/// what "no process holds them" needs before it means anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visibility {
    /// The node's processes (or the pod's, with a shared PID namespace) are visible and
    /// their open files readable.
    Visible { processes: usize },
    /// Cannot rule out a process it does not see; why, and what to configure.
    Limited(String),
}

/// What the probe found, before judging it (pure input of [`judge_visibility`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcFacts {
    /// The inode of our PID namespace (`/proc/self/ns/pid`).
    pub pid_ns: Option<u64>,
    /// PID 1 of our namespace is this process, or shares our mount namespace (our own
    /// container's init): nothing outside the container is visible.
    pub pid1_is_our_container: bool,
    pub processes: usize,
    /// Processes whose `/proc/<pid>/fd` could not be read (pid, error) and that could hold
    /// files of the volume ([`could_hold`]).
    pub unreadable: Vec<(u32, String)>,
    /// Processes whose `/proc/<pid>/fd` could not be read but that cannot hold files of the
    /// volume: the pod's `pause`, another container's tools (pid, why).
    pub ignored: Vec<(u32, String)>,
}

pub fn judge_visibility(f: &ProcFacts) -> Visibility {
    let host = f.pid_ns == Some(PROC_PID_INIT_INO);
    if !host && f.pid1_is_our_container {
        return Visibility::Limited(format!(
            "cleave is in a PID namespace of its own (pid namespace {}, {} processes visible): it cannot see whether Cassandra runs. Set `shareProcessNamespace: true` on the pod (Cassandra in the same pod) or `hostPID: true`",
            f.pid_ns.map_or("unknown".into(), |n| n.to_string()),
            f.processes
        ));
    }
    if let Some((pid, e)) = f.unreadable.first() {
        return Visibility::Limited(format!(
            "cannot read the open files of {} process(es) that could hold files of the data volume, e.g. /proc/{pid}/fd: {e}. Run cleave as the Cassandra user, or give it CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE (both: listing another user's /proc/<pid>/fd needs the first, reading its links the second; docs/split.md)",
            f.unreadable.len()
        ));
    }
    Visibility::Visible {
        processes: f.processes,
    }
}

fn ns_inode(link: &Path) -> Option<u64> {
    // "pid:[4026531836]"
    let t = std::fs::read_link(link).ok()?;
    let t = t.to_str()?;
    t.split_once('[')?.1.strip_suffix(']')?.parse().ok()
}

/// Probes `/proc`: our PID namespace, PID 1's, and whether every process's fds are readable.
pub fn probe_visibility() -> Visibility {
    judge_visibility(&proc_facts())
}

/// [`probe_visibility`] for the data directories `dirs`: a process whose fds cannot be read
/// counts only if it [`could_hold`] files under one of them.
pub fn probe_visibility_for(dirs: &[&Path]) -> Visibility {
    judge_visibility(&proc_facts_for(dirs))
}

pub fn proc_facts() -> ProcFacts {
    proc_facts_for(&[])
}

/// Linux capability bits (include/uapi/linux/capability.h).
pub const CAP_DAC_OVERRIDE: u32 = 1;
pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYS_ADMIN: u32 = 21;

/// The credentials of a process that decide what it can reach, from `/proc/<pid>/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creds {
    /// Filesystem uid and gid (the fourth column of `Uid:`/`Gid:`): what path lookups use.
    pub fsuid: u32,
    pub fsgid: u32,
    pub groups: Vec<u32>,
    /// `CapEff`, the effective capability set.
    pub cap_eff: u64,
}

impl Creds {
    pub fn has_cap(&self, cap: u32) -> bool {
        self.cap_eff & (1u64 << cap) != 0
    }
}

/// Parses the `Uid:`, `Gid:`, `Groups:` and `CapEff:` lines of `/proc/<pid>/status`.
pub fn parse_creds(status: &str) -> Option<Creds> {
    let field = |name: &str| {
        status.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|r| r.strip_prefix(':'))
                .map(str::trim)
        })
    };
    let fs_id =
        |name: &str| -> Option<u32> { field(name)?.split_whitespace().nth(3)?.parse().ok() };
    Some(Creds {
        fsuid: fs_id("Uid")?,
        fsgid: fs_id("Gid")?,
        groups: field("Groups")
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|g| g.parse().ok())
            .collect(),
        cap_eff: u64::from_str_radix(field("CapEff")?, 16).ok()?,
    })
}

/// What it takes to reach a data directory: the device of its filesystem and the owner,
/// group and mode of every directory from that filesystem's mount point down to it (the
/// part of the path that is the same in every mount namespace that has the volume).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeAccess {
    pub dir: PathBuf,
    /// `major:minor` as `/proc/<pid>/mountinfo` writes it.
    pub dev: (u32, u32),
    /// (uid, gid, mode) of each directory, mount point first.
    pub components: Vec<(u32, u32, u32)>,
}

/// [`VolumeAccess`] of `dir`, from `stat` and our own `/proc/self/mountinfo`.
pub fn volume_access(dir: &Path) -> Result<VolumeAccess> {
    use std::os::unix::fs::MetadataExt;
    let dir = std::fs::canonicalize(dir)?;
    let dev = std::fs::metadata(&dir)?.dev();
    let dev = (libc::major(dev), libc::minor(dev));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // The deepest mount of that device whose mount point is a prefix of dir.
    let top = mountinfo_entries(&mounts)
        .filter(|m| m.dev == dev && dir.starts_with(&m.mount_point))
        .map(|m| m.mount_point)
        .max_by_key(|p| p.components().count())
        .unwrap_or_else(|| PathBuf::from("/"));
    let mut components = Vec::new();
    let mut p = dir.as_path();
    loop {
        let m = std::fs::metadata(p)?;
        components.push((m.uid(), m.gid(), m.mode()));
        if p == top {
            break;
        }
        match p.parent() {
            Some(q) => p = q,
            None => break,
        }
    }
    components.reverse();
    Ok(VolumeAccess {
        dir,
        dev,
        components,
    })
}

/// The mount point of the filesystem holding `dir` (the deepest mount of its device that
/// is a prefix of it), to name the filesystem in a message; `None` when it cannot be told.
pub fn mount_point(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dir = std::fs::canonicalize(dir).ok()?;
    let dev = std::fs::metadata(&dir).ok()?.dev();
    let dev = (libc::major(dev), libc::minor(dev));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo_entries(&mounts)
        .filter(|m| m.dev == dev && dir.starts_with(&m.mount_point))
        .map(|m| m.mount_point)
        .max_by_key(|p| p.components().count())
}

struct MountEntry {
    dev: (u32, u32),
    mount_point: PathBuf,
}

/// The lines of a mountinfo (proc(5): `id parent major:minor root mount-point ...`).
fn mountinfo_entries(text: &str) -> impl Iterator<Item = MountEntry> + '_ {
    text.lines().filter_map(|l| {
        let mut w = l.split_whitespace();
        let dev = w.nth(2)?;
        let (ma, mi) = dev.split_once(':')?;
        let mount_point = w.nth(1)?;
        Some(MountEntry {
            dev: (ma.parse().ok()?, mi.parse().ok()?),
            mount_point: PathBuf::from(unescape_mountinfo(mount_point)),
        })
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = std::str::from_utf8(&b[i + 1..i + 4]).ok();
            if let Some(v) = oct.and_then(|o| u8::from_str_radix(o, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a process whose open files cannot be read could still hold files of the volume
/// `v`: it must be able to *reach* the volume — the volume's filesystem is in its
/// `mountinfo` (`None`: unreadable, so assumed), or it is privileged enough to enter
/// another mount namespace (CAP_SYS_ADMIN, CAP_SYS_PTRACE) — and to *search* down to the
/// data directory (execute permission on every directory from the mount point, by its
/// fsuid/fsgid/groups, or CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH). The pod's `pause`
/// (another UID, its own root filesystem only) and the tools of a container that does not
/// mount the volume fail the first; a process of another UID that mounts it but may not
/// enter `0700` directories fails the second.
pub fn could_hold(c: &Creds, mountinfo: Option<&str>, v: &VolumeAccess) -> bool {
    let reach = c.has_cap(CAP_SYS_ADMIN)
        || c.has_cap(CAP_SYS_PTRACE)
        || mountinfo.is_none_or(|m| mountinfo_entries(m).any(|e| e.dev == v.dev));
    let search = c.has_cap(CAP_DAC_OVERRIDE)
        || c.has_cap(CAP_DAC_READ_SEARCH)
        || v.components.iter().all(|&(uid, gid, mode)| {
            if c.fsuid == uid {
                mode & 0o100 != 0
            } else if c.fsgid == gid || c.groups.contains(&gid) {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            }
        });
    reach && search
}

/// A `/proc/<pid>/status` of a process that has exited: state `Z` (zombie) or `X` (dead).
pub fn is_exited(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .and_then(|r| r.trim_start().chars().next())
        .is_some_and(|c| c == 'Z' || c == 'X')
}

/// Why a process cannot hold files of any of `vols`, or `None` if it could (or if its
/// status cannot be read: then it counts, to be safe).
fn cannot_hold(pid_dir: &Path, vols: &[VolumeAccess]) -> Option<String> {
    let status = std::fs::read_to_string(pid_dir.join("status")).ok()?;
    if is_exited(&status) {
        // The kernel closes a process's files (`exit_files` in `do_exit`) before it becomes
        // a zombie; what is left is its exit status for a parent that has not reaped it
        // (a pod's `pause` reaps, an idle stand-in may not). Its fd directory is unreadable
        // to another UID all the same, so it must not count as a possible holder.
        return Some("exited (a zombie: its files are closed)".to_string());
    }
    if vols.is_empty() {
        return None;
    }
    let creds = parse_creds(&status)?;
    let mountinfo = std::fs::read_to_string(pid_dir.join("mountinfo")).ok();
    if vols
        .iter()
        .any(|v| could_hold(&creds, mountinfo.as_deref(), v))
    {
        return None;
    }
    Some(format!(
        "uid {} without access to {}",
        creds.fsuid,
        vols.iter()
            .map(|v| v.dir.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// [`proc_facts`], judging unreadable processes by [`could_hold`] for `dirs` (none: every
/// unreadable process counts).
pub fn proc_facts_for(dirs: &[&Path]) -> ProcFacts {
    // A directory that cannot be stat'ed gives no rule: its unreadable processes count.
    let vols: Vec<VolumeAccess> = dirs.iter().filter_map(|d| volume_access(d).ok()).collect();
    let vols = if vols.len() == dirs.len() {
        vols
    } else {
        Vec::new()
    };
    let me = std::process::id();
    let mine = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|st| parse_creds(&st));
    let my_uid = mine.as_ref().map(|c| c.fsuid);
    let ptrace = mine.as_ref().is_some_and(|c| c.has_cap(CAP_SYS_PTRACE));
    let own_mnt = ns_inode(std::path::Path::new("/proc/self/ns/mnt"));
    let pid1_mnt = ns_inode(std::path::Path::new("/proc/1/ns/mnt"));
    let mut processes = 0;
    let mut unreadable = Vec::new();
    let mut ignored = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.filter_map(|e| e.ok()) {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            processes += 1;
            if pid == me {
                continue;
            }
            // Listing another user's fd directory needs CAP_DAC_READ_SEARCH (or
            // CAP_DAC_OVERRIDE); reading its links needs CAP_SYS_PTRACE as well
            // (`proc_fd_access_allowed` → `ptrace_may_access`). Without CAP_SYS_PTRACE a
            // listing of another user's process proves nothing, so one of its links is read
            // too (a process with no open file holds nothing).
            let other_user = !ptrace
                && std::fs::read_to_string(e.path().join("status"))
                    .ok()
                    .and_then(|st| parse_creds(&st))
                    .is_none_or(|c| Some(c.fsuid) != my_uid);
            let probe = std::fs::read_dir(e.path().join("fd")).and_then(|mut rd| {
                match rd.next().filter(|_| other_user) {
                    Some(Ok(fd)) => std::fs::read_link(fd.path()).map(|_| ()),
                    Some(Err(err)) => Err(err),
                    None => Ok(()),
                }
            });
            if let Err(err) = probe {
                // A process that exited between the listing and now is not a holder.
                if err.kind() != ErrorKind::NotFound {
                    match cannot_hold(&e.path(), &vols) {
                        Some(why) => ignored.push((pid, why)),
                        None => unreadable.push((pid, err.to_string())),
                    }
                }
            }
        }
    }
    ProcFacts {
        pid_ns: ns_inode(std::path::Path::new("/proc/self/ns/pid")),
        pid1_is_our_container: me == 1 || (own_mnt.is_some() && own_mnt == pid1_mnt),
        processes,
        unreadable,
        ignored,
    }
}

/// A file's identity in every mount namespace: `(st_dev, st_ino)`. The text of a
/// `/proc/<pid>/fd` link or of a `maps` path is the path *in the holder's* mount namespace
/// (a bind mount, or a container that mounts the volume elsewhere, names it differently),
/// but `stat` of `/proc/<pid>/fd/N` follows the kernel's own reference to the open file
/// (`proc_fd_link`, a "magic link"), and `maps` carries the device and inode of each mapping.
pub type FileId = (u64, u64);

/// Every file and directory under `root` (itself excluded), by [`FileId`], and `root`'s own.
/// Symbolic links are not followed: a link inside the tree names a file elsewhere, which
/// Cassandra does not own through this table.
pub fn tree_ids(root: &Path) -> Result<(FileId, std::collections::HashSet<FileId>)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(root)?;
    let root_id = (m.dev(), m.ino());
    let mut ids = std::collections::HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        // A directory removed or made unreadable meanwhile gives no ids: the path test
        // of [`holders`] still covers what lies under it in our namespace.
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.filter_map(|e| e.ok()) {
            let Ok(m) = e.metadata() else { continue };
            if ids.insert((m.dev(), m.ino())) && m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok((root_id, ids))
}

/// One mapping of `/proc/<pid>/maps` that maps a file: `address perms offset dev inode
/// path` (proc(5)); `dev` is `major:minor` in hex, and the path runs to the end of the line,
/// spaces included (the kernel escapes only a newline, as `\012`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub id: FileId,
    pub path: String,
}

pub fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let s = rest.trim_start_matches(' ');
        let end = s.find(' ').unwrap_or(s.len());
        let (f, r) = s.split_at(end);
        rest = r;
        f
    };
    let (_addr, _perms, _offset, dev, inode) = (field(), field(), field(), field(), field());
    let (ma, mi) = dev.split_once(':')?;
    let dev = libc::makedev(
        u32::from_str_radix(ma, 16).ok()?,
        u32::from_str_radix(mi, 16).ok()?,
    );
    let ino: u64 = inode.parse().ok()?;
    // Anonymous memory: inode 0 and no file behind it.
    if ino == 0 {
        return None;
    }
    Some(Mapping {
        id: (dev, ino),
        path: rest.trim_start_matches(' ').to_string(),
    })
}

/// `FLOCK` lines of `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`,
/// device in hex): (pid, file). Waiters (`1: -> FLOCK ...`) hold nothing and are skipped.
pub fn parse_flocks(text: &str) -> Vec<(u32, FileId)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 6 || f[1] != "FLOCK" {
                return None;
            }
            let pid = f[4].parse().ok()?;
            let mut id = f[5].split(':');
            let ma = u32::from_str_radix(id.next()?, 16).ok()?;
            let mi = u32::from_str_radix(id.next()?, 16).ok()?;
            let ino = id.next()?.parse().ok()?;
            Some((pid, (libc::makedev(ma, mi), ino)))
        })
        .collect()
}

/// A process that holds (has open, or maps) a file under a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Its command line, arguments separated by spaces.
    pub cmd: String,
    /// What it holds, as it names it (`fd 3 -> /its/path` or `map /its/path`).
    pub what: String,
    /// It also holds a `flock` on the directory or one below it: another cleave (cleave
    /// locks table directories, `io::lock`; Cassandra takes no `flock` on them).
    pub locks_the_tree: bool,
}

/// Processes other than this one that hold a file under `root` (the directory itself
/// excluded: a cleave holds it open to `flock` it), in any mount namespace: by
/// [`FileId`] against every file now under `root`, and by path under `root` in our own
/// namespace (which also catches a file deleted since it was opened).
pub fn holders(root: &Path) -> Vec<Holder> {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let (root_id, ids) = tree_ids(&root).unwrap_or(((u64::MAX, u64::MAX), Default::default()));
    let held = |id: FileId| id != root_id && ids.contains(&id);
    let under = |p: &Path| p.starts_with(&root) && p != root;
    let flocks = std::fs::read_to_string("/proc/locks")
        .map(|t| parse_flocks(&t))
        .unwrap_or_default();
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.filter_map(|e| e.ok()) {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let mut what = None;
        if let Ok(fds) = std::fs::read_dir(p.path().join("fd")) {
            what = fds.filter_map(|e| e.ok()).find_map(|fd| {
                let link = std::fs::read_link(fd.path()).unwrap_or_default();
                // stat, never open: an fd may be a FIFO or a device.
                let by_id = std::fs::metadata(fd.path()).is_ok_and(|m| held((m.dev(), m.ino())));
                (by_id || under(&link)).then(|| {
                    format!(
                        "fd {} -> {}",
                        fd.file_name().to_string_lossy(),
                        link.display()
                    )
                })
            });
        }
        if what.is_none() {
            if let Ok(maps) = std::fs::read_to_string(p.path().join("maps")) {
                what = maps.lines().filter_map(parse_maps_line).find_map(|m| {
                    let path = m.path.strip_suffix(" (deleted)").unwrap_or(&m.path);
                    (held(m.id) || under(Path::new(path))).then(|| format!("map {}", m.path))
                });
            }
        }
        let Some(what) = what else { continue };
        let cmd = std::fs::read(p.path().join("cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .replace('\0', " ")
                    .trim()
                    .to_string()
            })
            .unwrap_or_default();
        let locks_the_tree = flocks
            .iter()
            .any(|&(lp, id)| lp == pid && (id == root_id || ids.contains(&id)));
        found.push(Holder {
            pid,
            cmd,
            what,
            locks_the_tree,
        });
    }
    found
}

/// What this process observes about its place in its PID namespace, for
/// [`judge_container_init`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitFacts {
    /// `getpid()`: our pid in our own PID namespace.
    pub pid: u32,
    /// The pid `/proc/self` names: equal to `pid` only when `/proc` is our namespace's.
    pub proc_self: Option<u32>,
    /// The inode of our PID namespace (`/proc/self/ns/pid`).
    pub pid_ns: Option<u64>,
    /// Every other pid `/proc` lists.
    pub others: Vec<u32>,
}

pub fn init_facts() -> InitFacts {
    let pid = std::process::id();
    let proc_self = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse().ok()));
    let others = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
                .filter(|&p| p != pid)
                .collect()
        })
        .unwrap_or_default();
    InitFacts {
        pid,
        proc_self,
        pid_ns: ns_inode(Path::new("/proc/self/ns/pid")),
        others,
    }
}

/// `Ok` when this process is the first and only process of a PID namespace of its own —
/// the main process of a container that has just started, as the chart's init container
/// `cleave apply-pending` is (the image's entrypoint is cleave) — or why not.
///
/// What this rules out: a process started inside a *running* container (`kubectl exec`,
/// `docker exec`, a child of Cassandra or of the sidecar) joins a namespace whose PID 1
/// already exists, so it is never PID 1 and never alone; nor is a process on the host (the
/// initial PID namespace). No flag or environment variable can make a process PID 1.
pub fn judge_container_init(f: &InitFacts) -> std::result::Result<(), String> {
    if f.pid_ns == Some(PROC_PID_INIT_INO) {
        return Err("it runs in the host's PID namespace".into());
    }
    if f.pid != 1 {
        return Err(format!(
            "it is pid {} of its PID namespace, not its first process (started inside a running container, e.g. by kubectl exec)",
            f.pid
        ));
    }
    if f.proc_self != Some(f.pid) {
        return Err(format!(
            "/proc is not its PID namespace's (/proc/self is {:?})",
            f.proc_self
        ));
    }
    if let Some(p) = f.others.first() {
        return Err(format!(
            "its PID namespace holds {} other process(es), e.g. pid {p}",
            f.others.len()
        ));
    }
    Ok(())
}

/// Whether the file at `path` is open (or mapped) by anyone but this call, in any process
/// of the machine, whatever its PID or mount namespace: the kernel grants a write lease
/// (`fcntl(F_SETLEASE, F_WRLCK)`, fcntl(2)) only on a file no other open file description
/// refers to (`check_conflicting_open` in fs/locks.c: the inode's read and write counts
/// must be ours alone; a mapping keeps its file open, so it counts too). Needs the file's
/// owner as fsuid, or CAP_LEASE (else `EACCES`); leases may be disabled
/// (`/proc/sys/fs/leases-enable`, `EINVAL`). The lease is dropped at once.
pub fn open_elsewhere(path: &Path) -> Result<bool> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    // A lease is broken by the next open elsewhere, which signals the lease's owner (us)
    // with SIGIO, whose default action ends the process: ignore it while we hold one.
    // SAFETY: SIG_IGN installs no handler; the previous action is restored below.
    let old = unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
    // SAFETY: fcntl on a descriptor we own, with integer arguments only.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
    let err = Error::last_os_error();
    if rc == 0 {
        // SAFETY: as above.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    }
    drop(f);
    // SAFETY: restores the action `signal` returned.
    unsafe { libc::signal(libc::SIGIO, old) };
    match rc {
        0 => Ok(false),
        _ if err.raw_os_error() == Some(libc::EAGAIN) => Ok(true),
        _ => Err(err),
    }
}

#[cfg(test)]
mod visibility_tests {
    use super::*;

    #[test]
    fn a_zombie_holds_no_file_a_sleeping_process_may() {
        let st = |state: &str| {
            format!(
                "Name:\tsleep\nUmask:\t0022\nState:\t{state}\nTgid:\t2\nUid:\t999\t999\t999\t999\n"
            )
        };
        assert!(is_exited(&st("Z (zombie)")));
        assert!(is_exited(&st("X (dead)")));
        assert!(!is_exited(&st("S (sleeping)")));
        assert!(!is_exited(&st("R (running)")));
        assert!(!is_exited("Name:\tx\n"));
    }

    fn facts() -> ProcFacts {
        ProcFacts {
            pid_ns: Some(PROC_PID_INIT_INO),
            pid1_is_our_container: true,
            processes: 200,
            unreadable: vec![],
            ignored: vec![],
        }
    }

    #[test]
    fn the_host_pid_namespace_is_visible_a_private_one_is_not() {
        assert_eq!(
            judge_visibility(&facts()),
            Visibility::Visible { processes: 200 }
        );
        let private = ProcFacts {
            pid_ns: Some(4026532500),
            processes: 1,
            ..facts()
        };
        assert!(
            matches!(judge_visibility(&private), Visibility::Limited(m) if m.contains("shareProcessNamespace"))
        );
        // A shared pod PID namespace: PID 1 is the pause container, not ours.
        let shared = ProcFacts {
            pid1_is_our_container: false,
            ..private
        };
        assert!(matches!(
            judge_visibility(&shared),
            Visibility::Visible { .. }
        ));
    }

    #[test]
    fn unreadable_fds_limit_visibility() {
        let f = ProcFacts {
            unreadable: vec![(42, "Permission denied".into())],
            ..facts()
        };
        assert!(
            matches!(judge_visibility(&f), Visibility::Limited(m) if m.contains("/proc/42/fd") && m.contains("CAP_SYS_PTRACE"))
        );
    }

    const STATUS_999: &str = "Name:\tjava\nUid:\t999\t999\t999\t999\nGid:\t999\t999\t999\t999\nGroups:\t999 \nCapEff:\t0000000000000000\n";
    const MOUNTINFO_VOLUME: &str = "22 1 0:21 / / rw - overlay overlay rw\n1200 22 259:3 /pvc-1 /var/lib/cassandra rw,relatime - xfs /dev/nvme1n1 rw\n";
    const MOUNTINFO_PAUSE: &str =
        "22 1 0:21 / / rw - overlay overlay rw\n23 22 0:5 / /dev rw - tmpfs tmpfs rw\n";

    fn volume() -> VolumeAccess {
        VolumeAccess {
            dir: "/var/lib/cassandra/data/ks/t".into(),
            dev: (259, 3),
            // mount point, data, ks, t: UID 999, 0750 below the mount point.
            components: vec![
                (999, 999, 0o40755),
                (999, 999, 0o40750),
                (999, 999, 0o40750),
                (999, 999, 0o40750),
            ],
        }
    }

    #[test]
    fn parses_credentials() {
        let c = parse_creds(STATUS_999).unwrap();
        assert_eq!(
            (c.fsuid, c.fsgid, c.groups.clone(), c.cap_eff),
            (999, 999, vec![999], 0)
        );
        let root =
            parse_creds("Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\nCapEff:\t0000000000080004\n")
                .unwrap();
        assert!(root.has_cap(CAP_SYS_PTRACE) && root.has_cap(CAP_DAC_READ_SEARCH));
        assert!(!root.has_cap(CAP_SYS_ADMIN));
        assert_eq!(parse_creds("Uid:\t1\n"), None);
    }

    #[test]
    fn pause_and_tools_without_the_volume_cannot_hold_it() {
        let v = volume();
        let pause = Creds {
            fsuid: 65535,
            fsgid: 65535,
            groups: vec![],
            cap_eff: 0,
        };
        assert!(
            !could_hold(&pause, Some(MOUNTINFO_PAUSE), &v),
            "no mount of the volume"
        );
        // Even with the volume mounted, it cannot enter 0750 directories of UID 999.
        assert!(!could_hold(&pause, Some(MOUNTINFO_VOLUME), &v));
        // Cassandra's UID with the volume mounted can.
        let cass = parse_creds(STATUS_999).unwrap();
        assert!(could_hold(&cass, Some(MOUNTINFO_VOLUME), &v));
        assert!(
            !could_hold(&cass, Some(MOUNTINFO_PAUSE), &v),
            "its own mount namespace, no volume"
        );
        // Another UID in Cassandra's group: group bits.
        let grp = Creds {
            fsuid: 1000,
            fsgid: 5,
            groups: vec![999],
            cap_eff: 0,
        };
        assert!(could_hold(&grp, Some(MOUNTINFO_VOLUME), &v));
        // An unreadable mountinfo counts as having the volume.
        assert!(could_hold(&cass, None, &v));
    }

    #[test]
    fn privileged_processes_count_wherever_they_are() {
        let v = volume();
        let cap = |bits: &[u32]| Creds {
            fsuid: 0,
            fsgid: 0,
            groups: vec![],
            cap_eff: bits.iter().map(|b| 1u64 << b).sum(),
        };
        // CAP_SYS_ADMIN reaches any mount namespace, CAP_DAC_READ_SEARCH any directory.
        assert!(could_hold(
            &cap(&[CAP_SYS_ADMIN, CAP_DAC_READ_SEARCH]),
            Some(MOUNTINFO_PAUSE),
            &v
        ));
        assert!(could_hold(
            &cap(&[CAP_SYS_PTRACE, CAP_DAC_OVERRIDE]),
            Some(MOUNTINFO_PAUSE),
            &v
        ));
        // Reach without search (root without DAC capabilities, 0750 of UID 999): no.
        assert!(!could_hold(
            &cap(&[CAP_SYS_ADMIN]),
            Some(MOUNTINFO_PAUSE),
            &v
        ));
        // Search without reach: no.
        assert!(!could_hold(
            &cap(&[CAP_DAC_OVERRIDE]),
            Some(MOUNTINFO_PAUSE),
            &v
        ));
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(
            unescape_mountinfo("/var/lib/with\\040space"),
            "/var/lib/with space"
        );
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo("/end\\04"), "/end\\04");
    }

    #[test]
    fn this_process_sees_itself() {
        let f = proc_facts();
        assert!(f.processes >= 1);
        assert!(f.pid_ns.is_some());
    }
}

#[cfg(test)]
mod holder_tests {
    use super::*;

    #[test]
    fn maps_lines_keep_device_inode_and_a_path_with_spaces() {
        let l = "7f1c2a000000-7f1c2a080000 r--s 00000000 fd:01 1234567                    /var/lib/cassandra data/ks/t-1/nb-1-big-Data.db";
        let m = parse_maps_line(l).unwrap();
        assert_eq!(m.id, (libc::makedev(0xfd, 0x01), 1234567));
        assert_eq!(m.path, "/var/lib/cassandra data/ks/t-1/nb-1-big-Data.db");
        // A device number above 9 is hex (major 259 = 0x103).
        let m = parse_maps_line("00400000-00452000 r-xp 00000000 103:0a 42 /bin/x").unwrap();
        assert_eq!(m.id, (libc::makedev(259, 10), 42));
        // Anonymous memory and the heap are no file.
        assert_eq!(
            parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0                  [stack]"),
            None
        );
        assert_eq!(
            parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0"),
            None
        );
        assert_eq!(parse_maps_line("garbage"), None);
    }

    #[test]
    fn flock_lines_give_pid_and_file() {
        let t = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:77 0 EOF\n1: -> FLOCK  ADVISORY  WRITE 9 fd:01:77 0 EOF\n2: POSIX  ADVISORY  WRITE 5 08:01:9 0 EOF\n";
        assert_eq!(parse_flocks(t), vec![(4242, (libc::makedev(0xfd, 1), 77))]);
    }

    #[test]
    fn this_process_finds_a_file_it_maps_without_fd_by_inode() {
        use std::os::fd::AsRawFd;
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("with space");
        std::fs::create_dir(&sub).unwrap();
        let p = sub.join("f");
        std::fs::write(&p, b"x").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        // SAFETY: a one-page read-only mapping of a file we opened, unmapped below.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                1,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
        drop(f);
        let (_, ids) = tree_ids(d.path()).unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let found: Vec<Mapping> = maps
            .lines()
            .filter_map(parse_maps_line)
            .filter(|m| ids.contains(&m.id))
            .collect();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(m, 1) };
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(Path::new(&found[0].path), p);
    }

    #[test]
    fn only_the_first_and_only_process_of_a_pid_namespace_is_an_init_container() {
        let init = InitFacts {
            pid: 1,
            proc_self: Some(1),
            pid_ns: Some(4026532500),
            others: vec![],
        };
        assert_eq!(judge_container_init(&init), Ok(()));
        let no = |f: InitFacts, why: &str| {
            let e = judge_container_init(&f).unwrap_err();
            assert!(e.contains(why), "{e}");
        };
        // kubectl exec into a running container: PID 1 is someone else.
        no(
            InitFacts {
                pid: 7,
                proc_self: Some(7),
                others: vec![1],
                ..init.clone()
            },
            "not its first process",
        );
        no(
            InitFacts {
                others: vec![12],
                ..init.clone()
            },
            "other process",
        );
        no(
            InitFacts {
                proc_self: Some(4242),
                ..init.clone()
            },
            "/proc is not",
        );
        no(
            InitFacts {
                pid_ns: Some(PROC_PID_INIT_INO),
                ..init
            },
            "host",
        );
    }

    #[test]
    fn a_write_lease_sees_another_open_of_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        assert!(!open_elsewhere(&p).unwrap());
        let f = std::fs::File::open(&p).unwrap();
        assert!(
            open_elsewhere(&p).unwrap(),
            "our own other descriptor counts"
        );
        drop(f);
        assert!(!open_elsewhere(&p).unwrap());
    }
}

/// Gives `SIGPIPE` back its default action (terminate, silently), which the Rust runtime
/// sets to ignored before `main`. For a command whose output is a report: `cleave verify …
/// | head -1` then ends the way `cat` does when `head` closes the pipe, instead of
/// `println!` panicking on EPIPE (exit 101). Not for the servers (`run`, `stream`), whose
/// sockets must see EPIPE as an error of one connection rather than kill the process.
pub fn restore_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL has no preconditions; it is done
    // before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

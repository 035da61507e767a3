//! Process self-measurement for benchmarks and diagnostics (Linux).
//!
//! * peak resident set size: `VmHWM` in `/proc/self/status`, reset to the current RSS by
//!   writing `5` to `/proc/self/clear_refs` (Linux 4.0+, `Documentation/filesystems/proc.rst`);
//! * I/O counters: `/proc/self/io` (`rchar` counts bytes through `read(2)` and friends,
//!   `read_bytes` only those the block layer fetched, so a warm page cache reads 0);
//! * CPU time: `getrusage(RUSAGE_SELF)`, user and system, all threads.
//!
//! Everything returns `std::io::Result`: `/proc` may be missing or restricted (non-Linux,
//! some sandboxes), and the caller decides whether that is fatal.

use std::io::{Error, ErrorKind, Result};
use std::time::Duration;

const STATUS: &str = "/proc/self/status";
const CLEAR_REFS: &str = "/proc/self/clear_refs";
const IO: &str = "/proc/self/io";

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

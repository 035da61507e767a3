//! Page-cache residency of a file (`mincore(2)` on a read-only mapping), so that cleave
//! evicts only the pages it brought in itself.
//!
//! A split next to a live Cassandra reads the parent's Index.db (twice) and parts of its
//! Data.db. `POSIX_FADV_DONTNEED` on the whole file afterwards would also evict pages the
//! node's own reads were using (with `disk_access_mode: standard` Cassandra relies on the
//! page cache). Cassandra's callers of `NativeLibrary.trySkipCache` drop only what their
//! own sequential pass read, and the `nocache` tool does what is done here: record which
//! pages are resident before, and afterwards drop only pages that were not.
//!
//! Mapping a file does not read it: `mincore` reports residency without faulting pages in.
//!
//! `mincore` looks up every page of the range in the page cache, resident or not: its two
//! passes over a cold 3.6 GiB Data.db (945,000 pages) cost 30–40 ms of system time, half
//! of a split's (docs/benchmarks.md "Issue 21, deliverables 3 and 4"). Where the kernel
//! has `cachestat(2)` (Linux 6.5), which counts only the entries the cache holds in a
//! range, the snapshot is the runs of resident pages found by halving the file until each
//! half is all or nothing resident: a few dozen calls for the handful of pages a cold
//! parent has cached when the split starts. The eviction then drops the gaps between those
//! runs (`POSIX_FADV_DONTNEED` leaves pages that are not cached alone), which is exactly
//! "every page resident now that was not". A file with more than [`CACHESTAT_BUDGET`]
//! calls' worth of runs (a node reading it all over) takes the `mincore` snapshot as before.

use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Which pages of a file were resident when it was taken.
#[derive(Debug, Clone)]
pub struct Residency {
    path: PathBuf,
    len: u64,
    page: u64,
    snapshot: Snapshot,
}

#[derive(Debug, Clone)]
enum Snapshot {
    /// One byte per page, bit 0 = resident (`mincore`).
    Pages(Vec<u8>),
    /// The resident pages as sorted, disjoint, non-adjacent runs of page numbers
    /// (`cachestat`).
    Runs(Vec<Range<u64>>),
}

/// Most `cachestat` calls a snapshot makes before it gives up for `mincore`: about 2 ×
/// 20 calls a run of resident pages in a file of a million pages, so ~100 runs.
const CACHESTAT_BUDGET: u32 = 4096;

/// `cachestat(2)`'s number: 451 on every architecture (the unified syscall table); the
/// libc crate does not name it for x86_64 glibc yet.
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range` of `<linux/mman.h>`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of `<linux/mman.h>`.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Pages of `file` in the page cache among pages `pages` (of `page` bytes), by
/// `cachestat(2)` (which counts only the covered part of a large folio); `None` where the
/// kernel has no such call (before 6.5, or `CONFIG_CACHESTAT_SYSCALL=n`) or refuses it.
fn cached_pages(file: &File, pages: &Range<u64>, page: u64) -> Option<u64> {
    if pages.is_empty() {
        return Some(0);
    }
    let range = CachestatRange {
        off: pages.start * page,
        len: (pages.end - pages.start) * page,
    };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat reads `range` and writes one `struct cachestat` into `stat`, both
    // live, `#[repr(C)]` and laid out as <linux/mman.h> declares them; `flags` must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    (rc == 0).then_some(stat.nr_cache)
}

/// Appends the runs of resident pages among `pages` to `out` by halving until each part is
/// all or nothing resident; `None` when `cachestat` fails or `budget` calls run out.
fn cached_runs(
    file: &File,
    pages: Range<u64>,
    page: u64,
    budget: &mut u32,
    out: &mut Vec<Range<u64>>,
) -> Option<()> {
    if pages.is_empty() {
        return Some(());
    }
    *budget = budget.checked_sub(1)?;
    let n = cached_pages(file, &pages, page)?;
    if n == 0 {
        return Some(());
    }
    if n >= pages.end - pages.start {
        match out.last_mut() {
            Some(last) if last.end == pages.start => last.end = pages.end,
            _ => out.push(pages),
        }
        return Some(());
    }
    let mid = pages.start + (pages.end - pages.start) / 2;
    cached_runs(file, pages.start..mid, page, budget, out)?;
    cached_runs(file, mid..pages.end, page, budget, out)
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// The residency vector of `file` (empty for an empty file).
fn mincore(file: &File, len: u64, page: u64) -> std::io::Result<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let n = len.div_ceil(page) as usize;
    let mut vec = vec![0u8; n];
    // SAFETY: a read-only shared mapping of `len` bytes of an open file, unmapped below;
    // nothing reads through it, mincore only fills `vec`, which has one byte per page.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let rc = libc::mincore(addr, len as usize, vec.as_mut_ptr());
        let err = std::io::Error::last_os_error();
        libc::munmap(addr, len as usize);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok(vec)
}

impl Residency {
    /// The pages of `path` resident now.
    pub fn of(path: &Path) -> std::io::Result<Residency> {
        Residency::with_budget(path, CACHESTAT_BUDGET)
    }

    fn with_budget(path: &Path, mut budget: u32) -> std::io::Result<Residency> {
        let f = File::open(path)?;
        let len = f.metadata()?.len();
        let page = page_size();
        let mut runs = Vec::new();
        let snapshot = match cached_runs(&f, 0..len.div_ceil(page), page, &mut budget, &mut runs) {
            Some(()) => Snapshot::Runs(runs),
            None => Snapshot::Pages(mincore(&f, len, page)?),
        };
        Ok(Residency {
            path: path.to_path_buf(),
            len,
            page,
            snapshot,
        })
    }

    /// How many pages are resident.
    pub fn resident_pages(&self) -> usize {
        match &self.snapshot {
            Snapshot::Pages(p) => p.iter().filter(|b| *b & 1 == 1).count(),
            Snapshot::Runs(r) => r.iter().map(|r| (r.end - r.start) as usize).sum(),
        }
    }

    /// Bytes resident: the resident pages, the last one counted only up to the file's end.
    pub fn resident_bytes(&self) -> u64 {
        (self.resident_pages() as u64 * self.page).min(self.len)
    }

    /// One byte a page, bit 0 = resident (as `mincore` gives it; built from the runs where
    /// the snapshot holds runs).
    pub fn pages(&self) -> Vec<u8> {
        match &self.snapshot {
            Snapshot::Pages(p) => p.clone(),
            Snapshot::Runs(r) => {
                let mut v = vec![0u8; self.len.div_ceil(self.page) as usize];
                for run in r {
                    if let Some(s) = v.get_mut(run.start as usize..run.end as usize) {
                        s.fill(1);
                    }
                }
                v
            }
        }
    }

    /// Whether page `i` was resident.
    pub fn resident(&self, i: u64) -> bool {
        match &self.snapshot {
            Snapshot::Pages(p) => p.get(i as usize).is_some_and(|b| b & 1 == 1),
            Snapshot::Runs(r) => r.iter().any(|r| r.contains(&i)),
        }
    }

    /// Drops from the page cache every page resident now that was not when `self` was
    /// taken, in runs (one fadvise per run). Like `trySkipCache`, a failure only costs page
    /// cache, so it is ignored; returns the number of pages dropped.
    pub fn evict_added(&self) -> usize {
        let Ok(f) = File::open(&self.path) else {
            return 0;
        };
        let pages = match &self.snapshot {
            Snapshot::Pages(p) => p,
            Snapshot::Runs(runs) => {
                // Drop the gaps between the runs that were resident.
                let mut dropped = 0;
                let mut from = 0;
                let end = self.len.div_ceil(self.page);
                for run in runs.iter().cloned().chain(std::iter::once(end..end)) {
                    let gap = from..run.start;
                    from = run.end;
                    if gap.is_empty() {
                        continue; // (a length of 0 would mean "to the end" to fadvise)
                    }
                    // Count what is dropped; where cachestat fails now, drop anyway.
                    let n = cached_pages(&f, &gap, self.page).unwrap_or(1);
                    if n > 0 {
                        super::fs::drop_cache(
                            &f,
                            gap.start * self.page,
                            (gap.end - gap.start) * self.page,
                        );
                        dropped += n as usize;
                    }
                }
                return dropped;
            }
        };
        let Ok(now) = mincore(&f, self.len, self.page) else {
            return 0;
        };
        let mut dropped = 0;
        let mut i = 0;
        while i < now.len() {
            let added = |j: usize| now[j] & 1 == 1 && pages.get(j).is_none_or(|b| b & 1 == 0);
            if !added(i) {
                i += 1;
                continue;
            }
            let start = i;
            while i < now.len() && added(i) {
                i += 1;
            }
            dropped += i - start;
            super::fs::drop_cache(&f, start as u64 * self.page, (i - start) as u64 * self.page);
        }
        dropped
    }
}

/// Snapshots residency of some files now and, when dropped, evicts what was added since:
/// on every path out of a split, success or error.
pub struct EvictAddedOnDrop(Vec<Residency>);

impl EvictAddedOnDrop {
    /// Files whose residency cannot be read (gone, unmappable) are skipped.
    pub fn new(paths: &[PathBuf]) -> EvictAddedOnDrop {
        EvictAddedOnDrop(paths.iter().filter_map(|p| Residency::of(p).ok()).collect())
    }
}

impl Drop for EvictAddedOnDrop {
    fn drop(&mut self) {
        for r in &self.0 {
            r.evict_added();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Resident pages by `mincore`: the reader the tests judge both snapshots by.
    fn resident_by_mincore(p: &Path) -> Vec<bool> {
        let f = File::open(p).unwrap();
        let len = f.metadata().unwrap().len();
        mincore(&f, len, page_size())
            .unwrap()
            .iter()
            .map(|b| b & 1 == 1)
            .collect()
    }

    /// A 16 MiB file (readahead of the warm parts cannot reach the whole file) with its
    /// first 16 KiB and 16 KiB at 8 MiB cached, nothing else; `None` where the filesystem
    /// keeps no page cache.
    fn warm_in_two_places(d: &Path) -> Option<(PathBuf, Vec<bool>)> {
        use std::os::unix::fs::FileExt;
        let p = d.join("f");
        std::fs::write(&p, vec![7u8; 16 << 20]).unwrap();
        let f = File::open(&p).unwrap();
        f.sync_all().unwrap();
        super::super::fs::drop_cache(&f, 0, 0);
        let mut buf = vec![0u8; 16 * 1024];
        f.read_exact_at(&mut buf, 0).unwrap();
        f.read_exact_at(&mut buf, 8 << 20).unwrap();
        let before = resident_by_mincore(&p);
        if !before.iter().any(|r| *r) {
            eprintln!("SKIP: this filesystem keeps no page cache (mincore reports nothing)");
            return None;
        }
        Some((p, before))
    }

    /// cleave reads everything after the snapshot, then evicts what it added: what was
    /// resident before stays, nothing else does, page by page.
    fn pages_read_after_the_snapshot_are_dropped_and_earlier_ones_kept(budget: u32) {
        let d = tempfile::tempdir().unwrap();
        let Some((p, before)) = warm_in_two_places(d.path()) else {
            return;
        };
        let snap = Residency::with_budget(&p, budget).unwrap();
        let runs = matches!(snap.snapshot, Snapshot::Runs(_));
        assert_eq!(
            runs,
            budget > 0 && cached_pages(&File::open(&p).unwrap(), &(0..1), page_size()).is_some()
        );
        for (i, r) in before.iter().enumerate() {
            assert_eq!(snap.resident(i as u64), *r, "page {i}, runs {runs}");
        }
        assert_eq!(snap.resident_pages(), before.iter().filter(|r| **r).count());
        let bits: Vec<bool> = snap.pages().iter().map(|b| b & 1 == 1).collect();
        assert_eq!(bits, before, "runs {runs}");
        let mut all = Vec::new();
        File::open(&p).unwrap().read_to_end(&mut all).unwrap();
        let dropped = snap.evict_added();
        assert!(dropped > 0, "the rest was brought in and dropped");
        assert_eq!(resident_by_mincore(&p), before, "runs {runs}");
    }

    #[test]
    fn cachestat_snapshot_keeps_what_was_resident_and_drops_the_rest() {
        pages_read_after_the_snapshot_are_dropped_and_earlier_ones_kept(CACHESTAT_BUDGET);
    }

    #[test]
    fn mincore_snapshot_keeps_what_was_resident_and_drops_the_rest() {
        // No cachestat call allowed: the mincore page vector, as on a kernel before 6.5 or
        // for a file with too many runs.
        pages_read_after_the_snapshot_are_dropped_and_earlier_ones_kept(0);
    }

    #[test]
    fn a_cold_file_is_one_cachestat_call() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, vec![7u8; 16 << 20]).unwrap();
        let f = File::open(&p).unwrap();
        f.sync_all().unwrap();
        super::super::fs::drop_cache(&f, 0, 0);
        if cached_pages(&f, &(0..1), page_size()).is_none() {
            eprintln!("SKIP: this kernel has no cachestat(2)");
            return;
        }
        let mut budget = CACHESTAT_BUDGET;
        let mut runs = Vec::new();
        let pages = (16u64 << 20).div_ceil(page_size());
        assert_eq!(
            cached_runs(&f, 0..pages, page_size(), &mut budget, &mut runs),
            Some(())
        );
        assert!(runs.is_empty());
        assert_eq!(budget, CACHESTAT_BUDGET - 1);
    }
}

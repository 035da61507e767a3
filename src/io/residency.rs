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

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Which pages of a file were resident when it was taken.
#[derive(Debug, Clone)]
pub struct Residency {
    path: PathBuf,
    len: u64,
    page: u64,
    /// One byte per page, bit 0 = resident (`mincore`).
    pages: Vec<u8>,
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
        let f = File::open(path)?;
        let len = f.metadata()?.len();
        let page = page_size();
        Ok(Residency {
            path: path.to_path_buf(),
            len,
            page,
            pages: mincore(&f, len, page)?,
        })
    }

    /// How many pages are resident.
    pub fn resident_pages(&self) -> usize {
        self.pages.iter().filter(|b| *b & 1 == 1).count()
    }

    /// Bytes resident: the resident pages, the last one counted only up to the file's end.
    pub fn resident_bytes(&self) -> u64 {
        (self.resident_pages() as u64 * self.page).min(self.len)
    }

    pub fn pages(&self) -> &[u8] {
        &self.pages
    }

    /// Drops from the page cache every page resident now that was not when `self` was
    /// taken, in runs (one fadvise per run). Like `trySkipCache`, a failure only costs page
    /// cache, so it is ignored; returns the number of pages dropped.
    pub fn evict_added(&self) -> usize {
        let Ok(f) = File::open(&self.path) else {
            return 0;
        };
        let Ok(now) = mincore(&f, self.len, self.page) else {
            return 0;
        };
        let mut dropped = 0;
        let mut i = 0;
        while i < now.len() {
            let added = |j: usize| now[j] & 1 == 1 && self.pages.get(j).is_none_or(|b| b & 1 == 0);
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

    #[test]
    fn pages_read_after_the_snapshot_are_dropped_and_earlier_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        // 16 MiB, so that readahead of the warm start cannot reach the whole file.
        let len = 16 << 20;
        std::fs::write(&p, vec![7u8; len]).unwrap();
        // Out of the cache, then warm the start only.
        let f = File::open(&p).unwrap();
        f.sync_all().unwrap();
        super::super::fs::drop_cache(&f, 0, 0);
        let page = page_size() as usize;
        let mut start = vec![0u8; 16 * 1024];
        (&f).read_exact(&mut start).unwrap();
        let before = Residency::of(&p).unwrap();
        let warm = before.resident_pages();
        if warm == 0 {
            eprintln!("SKIP: this filesystem keeps no page cache (mincore reports nothing)");
            return;
        }
        // cleave reads everything, then evicts what it added.
        let mut all = Vec::new();
        File::open(&p).unwrap().read_to_end(&mut all).unwrap();
        let dropped = before.evict_added();
        let after = Residency::of(&p).unwrap();
        assert!(dropped > 0, "the second half was brought in and dropped");
        for (i, (b, a)) in before.pages().iter().zip(after.pages()).enumerate() {
            assert_eq!(b & 1, a & 1, "page {i} of {}", len / page);
        }
    }
}

//! Page-cache control for cold-cache benchmarks: write back everything, drop the whole
//! machine's clean caches, and read what is cached (`/proc/meminfo` Cached, `mincore` of a
//! file through [`super::residency`]).
//!
//! `drop_caches` is the kernel's documented way to empty the page cache for a benchmark
//! (`Documentation/admin-guide/sysctl/vm.rst`, "drop_caches": "This is a non-destructive
//! operation and will not free any dirty objects. To increase the number of objects freed
//! by this operation, the user may run `sync' prior to writing to
//! /proc/sys/vm/drop_caches"). It needs root and affects every process on the machine, so
//! only benchmarks use it; the split itself evicts only what it read
//! ([`super::residency::EvictAddedOnDrop`]).

use std::io::{Error, ErrorKind, Result};
use std::path::Path;

const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";
const MEMINFO: &str = "/proc/meminfo";

/// `sync(2)`: schedules the writeback of every dirty page of every filesystem and waits for
/// it (Linux waits). Dirty pages cannot be dropped, so a cold run calls this first.
pub fn sync_all() {
    nix::unistd::sync();
}

/// Writes `3` to `/proc/sys/vm/drop_caches`: frees the clean page cache, dentries and
/// inodes of the whole machine. Fails without root.
pub fn drop_caches() -> Result<()> {
    std::fs::write(DROP_CACHES, b"3")
}

/// `Cached` of `/proc/meminfo`, in bytes: the page cache of the whole machine.
pub fn meminfo_cached() -> Result<u64> {
    let text = std::fs::read_to_string(MEMINFO)?;
    super::proc::parse_status_kb(&text, "Cached")
        .map(|kb| kb * 1024)
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, format!("no Cached in {MEMINFO}")))
}

/// Bytes of `path` resident in the page cache now (`mincore`; 0 for an empty file).
pub fn resident_bytes(path: &Path) -> Result<u64> {
    Ok(super::residency::Residency::of(path)?.resident_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_file_is_resident_and_an_empty_one_is_not() {
        let dir = std::env::temp_dir().join(format!("cleave-cache-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, vec![7u8; 100_000]).unwrap();
        // Just written: resident, counted up to the file's end (not the last page's).
        assert_eq!(resident_bytes(&p).unwrap(), 100_000);
        let e = dir.join("e");
        std::fs::write(&e, b"").unwrap();
        assert_eq!(resident_bytes(&e).unwrap(), 0);
        assert!(meminfo_cached().unwrap() > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

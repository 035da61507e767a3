//! Filesystem facts and durability: block size, device identity, fsync of a directory,
//! page-cache advice.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The filesystem's block size (`statvfs.f_bsize`): FICLONERANGE's alignment unit.
pub fn block_size(path: &Path) -> std::io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    Ok((st.block_size() as u64).max(512))
}

/// The device a path lives on: equal devices mean one filesystem (needed for reflink and
/// for an atomic rename from staging).
pub fn device_of(path: &Path) -> std::io::Result<u64> {
    Ok(std::fs::metadata(path)?.dev())
}

/// fsync of a directory, so that names created or removed in it are durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    super::durable::fsync(&File::open(dir)?)
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` on a range (`len` 0 = to EOF). Like Cassandra's
/// `NativeLibrary.trySkipCache`, a failure only costs page cache, so it is ignored.
pub fn drop_cache(file: &File, offset: u64, len: u64) {
    let _ = nix::fcntl::posix_fadvise(
        file,
        offset as libc::off_t,
        len as libc::off_t,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    );
}

/// Whether a directory's filesystem is one that shares extents (XFS, btrfs), from
/// `statfs.f_type`, without writing anything: what a dry run reports. XFS without
/// `reflink=1` is reported as supported here; the real probe of a split tells them apart.
pub fn guess_reflink(dir: &Path) -> super::reflink::ReflinkSupport {
    use nix::sys::statfs::{statfs, BTRFS_SUPER_MAGIC, XFS_SUPER_MAGIC};
    match statfs(dir) {
        Ok(st)
            if st.filesystem_type() == XFS_SUPER_MAGIC
                || st.filesystem_type() == BTRFS_SUPER_MAGIC =>
        {
            super::reflink::ReflinkSupport::Supported {
                block_size: block_size(dir).unwrap_or(4096),
            }
        }
        Ok(_) => {
            super::reflink::ReflinkSupport::Refused(super::reflink::CloneRefusal::NotSupported)
        }
        Err(_) => super::reflink::ReflinkSupport::Refused(super::reflink::CloneRefusal::Invalid),
    }
}

/// Space of the filesystem holding `path` (`statvfs`): bytes available to an unprivileged
/// writer (`f_bavail`) and the filesystem's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub available: u64,
    pub total: u64,
}

pub fn space(path: &Path) -> std::io::Result<Space> {
    let st = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    let frag = st.fragment_size() as u64;
    Ok(Space {
        available: (st.blocks_available() as u64).saturating_mul(frag),
        total: (st.blocks() as u64).saturating_mul(frag),
    })
}

/// Bytes in use on the filesystem holding `path` (`statvfs`: `(f_blocks - f_bfree) ×
/// f_frsize`, so blocks reserved for root count as free).
pub fn used_bytes(path: &Path) -> std::io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    Ok((st.blocks() as u64)
        .saturating_sub(st.blocks_free() as u64)
        .saturating_mul(st.fragment_size() as u64))
}

/// Writes `bytes` to `path` so that after a crash the file is either absent (or its old
/// contents) or complete: a temporary file beside it, fsynced, renamed over `path`, the
/// directory fsynced. Fault points `<what>:tmp-written`, `<what>:renamed` (`io::fault`).
pub fn write_durable(path: &Path, bytes: &[u8], what: &str) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    super::durable::fsync(&f)?;
    drop(f);
    super::fault::point(&format!("{what}:tmp-written"));
    std::fs::rename(&tmp, path)?;
    super::fault::point(&format!("{what}:renamed"));
    sync_dir(dir)
}

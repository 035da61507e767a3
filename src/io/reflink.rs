//! FICLONERANGE (shared extents) with an explicit capability probe.
//!
//! `ioctl(dst, FICLONERANGE, {src_fd, src_offset, src_length, dest_offset})` shares the
//! source range's extents with the destination (XFS with reflink=1, btrfs). Offsets and
//! length must be multiples of the filesystem block size (the length may instead run to the
//! source's EOF). The errno tells why a filesystem refuses, and the operator deserves to
//! know which: not supported by this filesystem, different filesystems, not a file that
//! takes the ioctl, misaligned or invalid range, or not permitted.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Why the kernel refused to share extents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CloneRefusal {
    /// EOPNOTSUPP: the filesystem cannot share extents (ext4, tmpfs, XFS without reflink).
    NotSupported,
    /// EXDEV: source and destination are on different filesystems.
    CrossDevice,
    /// ENOTTY: the file does not take this ioctl (not a regular file on a block filesystem).
    NoIoctl,
    /// EINVAL: unaligned offsets/length, or a range the filesystem will not clone.
    Invalid,
    /// EPERM / EACCES / EBADF: not permitted (immutable/append-only file, wrong open mode).
    NotPermitted,
    /// Any other errno.
    Other(i32),
}

impl CloneRefusal {
    fn from_errno(e: i32) -> CloneRefusal {
        match e {
            libc::EOPNOTSUPP => CloneRefusal::NotSupported,
            libc::EXDEV => CloneRefusal::CrossDevice,
            libc::ENOTTY => CloneRefusal::NoIoctl,
            libc::EINVAL => CloneRefusal::Invalid,
            libc::EPERM | libc::EACCES | libc::EBADF => CloneRefusal::NotPermitted,
            other => CloneRefusal::Other(other),
        }
    }

    /// A short label for metrics and JSON.
    pub fn label(&self) -> &'static str {
        match self {
            CloneRefusal::NotSupported => "reflink_not_supported",
            CloneRefusal::CrossDevice => "cross_device",
            CloneRefusal::NoIoctl => "no_clone_ioctl",
            CloneRefusal::Invalid => "clone_invalid",
            CloneRefusal::NotPermitted => "clone_not_permitted",
            CloneRefusal::Other(_) => "clone_failed",
        }
    }
}

impl fmt::Display for CloneRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloneRefusal::NotSupported => write!(
                f,
                "the filesystem does not support shared extents (FICLONERANGE: EOPNOTSUPP)"
            ),
            CloneRefusal::CrossDevice => write!(
                f,
                "source and destination are on different filesystems (FICLONERANGE: EXDEV)"
            ),
            CloneRefusal::NoIoctl => write!(f, "the file does not accept FICLONERANGE (ENOTTY)"),
            CloneRefusal::Invalid => write!(
                f,
                "the filesystem rejected the clone range (FICLONERANGE: EINVAL)"
            ),
            CloneRefusal::NotPermitted => write!(
                f,
                "cloning is not permitted on these files (FICLONERANGE: EPERM/EACCES/EBADF)"
            ),
            CloneRefusal::Other(e) => write!(
                f,
                "FICLONERANGE failed: {}",
                std::io::Error::from_raw_os_error(*e)
            ),
        }
    }
}

/// Shares `len` bytes of `src` at `src_offset` into `dst` at `dst_offset`.
pub fn clone_range(
    src: &File,
    src_offset: u64,
    len: u64,
    dst: &File,
    dst_offset: u64,
) -> Result<(), CloneRefusal> {
    // Request number and struct from libc (`<linux/fs.h>`): nix has no FICLONERANGE wrapper.
    let arg = libc::file_clone_range {
        src_fd: src.as_raw_fd() as i64,
        src_offset,
        src_length: len,
        dest_offset: dst_offset,
    };
    // SAFETY: FICLONERANGE reads a `struct file_clone_range` we own for the duration of the call.
    let rc = unsafe {
        libc::ioctl(
            dst.as_raw_fd(),
            libc::FICLONERANGE as _,
            &arg as *const libc::file_clone_range,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(CloneRefusal::from_errno(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    }
}

/// Whether extents of `src` can be shared into new files in `dir`, found by cloning its
/// first block into a scratch file there (removed afterwards).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ReflinkSupport {
    Supported { block_size: u64 },
    Refused(CloneRefusal),
}

pub fn probe(src: &File, dir: &Path) -> std::io::Result<ReflinkSupport> {
    let block_size = super::fs::block_size(dir)?;
    let src_len = src.metadata()?.len();
    let scratch_path = dir.join(format!(
        ".cleave-reflink-probe-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let scratch = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&scratch_path)?;
    let result = if src_len >= block_size {
        clone_range(src, 0, block_size, &scratch, 0)
    } else {
        // Too small to clone a whole block: ask with a zero-length clone of nothing at EOF,
        // which still goes through the filesystem's remap checks.
        clone_range(src, src_len, 0, &scratch, 0)
    };
    drop(scratch);
    std::fs::remove_file(&scratch_path)?;
    Ok(match result {
        Ok(()) => ReflinkSupport::Supported { block_size },
        Err(r) => ReflinkSupport::Refused(r),
    })
}

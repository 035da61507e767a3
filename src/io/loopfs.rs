//! A real XFS (reflink=1) filesystem on a loop-mounted image file, for tests and
//! benchmarks that need shared extents on a machine whose own disk is ext4. Needs root and
//! `mkfs.xfs` (Debian `xfsprogs`); the guard unmounts and deletes everything on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct LoopMount {
    pub mount_point: PathBuf,
    image: PathBuf,
    dir: PathBuf,
}

/// Why a loop filesystem cannot be had here (printed by tests that skip).
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root to mount a loop filesystem".into());
    }
    if Command::new("mkfs.xfs").arg("-V").output().is_err() {
        return Some("mkfs.xfs not found (apt-get install xfsprogs)".into());
    }
    None
}

fn run(cmd: &mut Command) -> std::io::Result<()> {
    let out = cmd.output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{:?} failed: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl LoopMount {
    /// Creates a sparse image of `size` bytes under `parent`, formats it XFS with
    /// reflink=1 (`fs = "xfs"`) or ext4 (`fs = "ext4"`), and mounts it.
    pub fn new(parent: &Path, size: u64, fs: &str) -> std::io::Result<LoopMount> {
        let dir = parent.join(format!("cleave-loop-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let image = dir.join("fs.img");
        let mount_point = dir.join("mnt");
        std::fs::create_dir(&mount_point)?;
        let f = std::fs::File::create(&image)?;
        f.set_len(size)?;
        drop(f);
        let guard = LoopMount {
            mount_point: mount_point.clone(),
            image: image.clone(),
            dir,
        };
        match fs {
            "xfs" => run(Command::new("mkfs.xfs")
                .args(["-q", "-f", "-m", "reflink=1"])
                .arg(&image))?,
            "ext4" => run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?,
            other => return Err(std::io::Error::other(format!("unknown filesystem {other}"))),
        }
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount_point))?;
        Ok(guard)
    }

    /// The image file the filesystem lives in (a benchmark drops its cached pages).
    pub fn image(&self) -> &Path {
        &self.image
    }

    /// Bytes used on the filesystem (statvfs), to measure what sharing saved.
    pub fn used_bytes(&self) -> std::io::Result<u64> {
        let st = nix::sys::statvfs::statvfs(&self.mount_point).map_err(std::io::Error::from)?;
        Ok((st.blocks() as u64 - st.blocks_free() as u64) * st.fragment_size() as u64)
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount_point).output();
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Bytes of `path` in extents the kernel reports as shared (FIEMAP's FIEMAP_EXTENT_SHARED).
pub fn shared_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_EXTENT_LAST: u32 = 0x1;
    const FIEMAP_EXTENT_SHARED: u32 = 0x2000;
    const N: usize = 256;
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Extent {
        logical: u64,
        physical: u64,
        length: u64,
        reserved64: [u64; 2],
        flags: u32,
        reserved: [u32; 3],
    }
    #[repr(C)]
    struct Fiemap {
        start: u64,
        length: u64,
        flags: u32,
        mapped_extents: u32,
        extent_count: u32,
        reserved: u32,
        extents: [Extent; N],
    }
    let f = std::fs::File::open(path)?;
    let mut shared = 0u64;
    let mut start = 0u64;
    loop {
        let mut m = Fiemap {
            start,
            length: u64::MAX - start,
            flags: 1, /* FIEMAP_FLAG_SYNC */
            mapped_extents: 0,
            extent_count: N as u32,
            reserved: 0,
            extents: [Extent::default(); N],
        };
        // SAFETY: FS_IOC_FIEMAP fills the struct we own, bounded by extent_count.
        let rc = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FIEMAP as _, &mut m as *mut Fiemap) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if m.mapped_extents == 0 {
            return Ok(shared);
        }
        let mut last = false;
        for e in &m.extents[..m.mapped_extents as usize] {
            if e.flags & FIEMAP_EXTENT_SHARED != 0 {
                shared += e.length;
            }
            start = e.logical + e.length;
            last |= e.flags & FIEMAP_EXTENT_LAST != 0;
        }
        if last {
            return Ok(shared);
        }
    }
}

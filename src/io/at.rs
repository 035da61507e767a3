//! Files opened relative to a directory handle, never following a symlink (`openat(2)`
//! with `O_NOFOLLOW`, `mkdirat(2)`): the stream receiver creates every file it writes this
//! way, so a symlink planted in its staging directory makes the open fail (ELOOP) instead
//! of redirecting bytes elsewhere. Names passed here are single path components checked
//! by the caller; this layer refuses anything with a `/` as well.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{mkdirat, Mode};

/// An open directory.
#[derive(Debug)]
pub struct Dir(OwnedFd);

fn one_component(name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a single path component"),
        ));
    }
    Ok(())
}

fn dir_flags() -> OFlag {
    OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY
}

impl Dir {
    /// Opens `path` itself; its last component must not be a symlink.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = nix::fcntl::open(path, dir_flags(), Mode::empty())?;
        Ok(Dir(fd))
    }

    /// Creates directory `name` (mode 0750) unless it exists.
    pub fn create_dir(&self, name: &str) -> io::Result<()> {
        one_component(name)?;
        match mkdirat(self.0.as_fd(), name, Mode::from_bits_truncate(0o750)) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub fn open_dir(&self, name: &str) -> io::Result<Dir> {
        one_component(name)?;
        Ok(Dir(openat(
            self.0.as_fd(),
            name,
            dir_flags(),
            Mode::empty(),
        )?))
    }

    /// Opens `name` for reading and writing, creating it (mode 0640) if absent; a symlink
    /// at `name` fails with ELOOP.
    pub fn open_rw(&self, name: &str) -> io::Result<File> {
        one_component(name)?;
        let fd = openat(
            self.0.as_fd(),
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o640),
        )?;
        Ok(File::from(fd))
    }

    /// Opens an existing `name` read-only, not following a symlink.
    pub fn open_read(&self, name: &str) -> io::Result<File> {
        one_component(name)?;
        let fd = openat(
            self.0.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(File::from(fd))
    }

    /// Renames `from` to `to` inside this directory (the target is replaced atomically).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        one_component(from)?;
        one_component(to)?;
        nix::fcntl::renameat(self.0.as_fd(), from, self.0.as_fd(), to)?;
        Ok(())
    }

    /// fsync of the directory: makes the names of created files durable.
    pub fn sync(&self) -> io::Result<()> {
        nix::unistd::fsync(self.0.as_fd())?;
        Ok(())
    }
}

/// Bytes available to an unprivileged writer and the filesystem's size (statvfs).
pub fn space(path: &Path) -> io::Result<(u64, u64)> {
    let s = nix::sys::statvfs::statvfs(path)?;
    let frag = s.fragment_size() as u64;
    Ok((s.blocks_available() as u64 * frag, s.blocks() as u64 * frag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_and_multi_component_names_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", t.path().join("link")).unwrap();
        let e = d.open_rw("link").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert!(d.open_read("link").is_err());
        std::os::unix::fs::symlink(t.path(), t.path().join("dirlink")).unwrap();
        assert!(d.open_dir("dirlink").is_err());
        for bad in ["../x", "a/b", "..", ".", ""] {
            assert!(d.open_rw(bad).is_err(), "{bad}");
        }
        d.create_dir("sub").unwrap();
        d.create_dir("sub").unwrap();
        let s = d.open_dir("sub").unwrap();
        std::io::Write::write_all(&mut s.open_rw("f").unwrap(), b"x").unwrap();
        assert_eq!(std::fs::read(t.path().join("sub/f")).unwrap(), b"x");
        let (avail, total) = space(t.path()).unwrap();
        assert!(total > 0 && avail <= total);
    }
}

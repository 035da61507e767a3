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

/// What a name in a directory is (`Dir::kind`), a symlink as itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// A device, FIFO or socket.
    Other,
}

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

    /// Opens `path` following symlinks: only for a root the operator configured (a data
    /// directory may well be a symlink to its disk); everything below it goes by `walk`.
    pub fn open_configured(path: &Path) -> io::Result<Dir> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
            Mode::empty(),
        )?;
        Ok(Dir(fd))
    }

    /// Whether `a` here and `b` in `other` are one inode (a `linkat` whose `unlinkat` a
    /// crash interrupted).
    pub fn same_file(&self, a: &str, other: &Dir, b: &str) -> io::Result<bool> {
        one_component(a)?;
        one_component(b)?;
        let f = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
        let x = nix::sys::stat::fstatat(self.0.as_fd(), a, f)?;
        let y = nix::sys::stat::fstatat(other.0.as_fd(), b, f)?;
        Ok(x.st_dev == y.st_dev && x.st_ino == y.st_ino)
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

    /// Creates `name` (mode 0640) for writing; fails with EEXIST if anything, a symlink
    /// included, is already there.
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        one_component(name)?;
        let fd = openat(
            self.0.as_fd(),
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o640),
        )?;
        Ok(File::from(fd))
    }

    /// Creates directory `name` unless it exists, then opens it; a symlink at `name` fails
    /// with ELOOP (mkdirat answers EEXIST for it, the open refuses to follow it).
    pub fn create_open_dir(&self, name: &str) -> io::Result<Dir> {
        self.create_dir(name)?;
        self.open_dir(name)
    }

    /// Opens (creating with `create`) every directory of `names` in turn below this one,
    /// each relative to its parent's descriptor and never through a symlink.
    pub fn walk(&self, names: &[&str], create: bool) -> io::Result<Dir> {
        let mut d = self.try_clone()?;
        for n in names {
            d = if create {
                d.create_open_dir(n)?
            } else {
                d.open_dir(n)?
            };
        }
        Ok(d)
    }

    /// Another handle on the same directory.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir(self.0.try_clone()?))
    }

    /// Whether `name` exists (a symlink counts, and is not followed).
    pub fn contains(&self, name: &str) -> io::Result<bool> {
        one_component(name)?;
        match nix::sys::stat::fstatat(
            self.0.as_fd(),
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(_) => Ok(true),
            Err(nix::errno::Errno::ENOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// What `name` is, not following a symlink; `None` if absent.
    pub fn kind(&self, name: &str) -> io::Result<Option<Kind>> {
        one_component(name)?;
        match nix::sys::stat::fstatat(
            self.0.as_fd(),
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => {
                let t = nix::sys::stat::SFlag::from_bits_truncate(st.st_mode)
                    & nix::sys::stat::SFlag::S_IFMT;
                Ok(Some(if t == nix::sys::stat::SFlag::S_IFDIR {
                    Kind::Dir
                } else if t == nix::sys::stat::SFlag::S_IFREG {
                    Kind::File
                } else if t == nix::sys::stat::SFlag::S_IFLNK {
                    Kind::Symlink
                } else {
                    Kind::Other
                }))
            }
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes file `name` (absent is fine).
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        one_component(name)?;
        match nix::unistd::unlinkat(
            self.0.as_fd(),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Moves `from` in this directory to `to` in `dest` without ever replacing an existing
    /// `to` (`renameat2(RENAME_NOREPLACE)`: EEXIST instead). Where the filesystem lacks the
    /// flag (EINVAL), `linkat` + `unlinkat` keeps the same no-replace guarantee: a crash
    /// between the two leaves both names of one inode, which the caller's journal resolves.
    pub fn rename_noreplace(&self, from: &str, dest: &Dir, to: &str) -> io::Result<()> {
        one_component(from)?;
        one_component(to)?;
        match nix::fcntl::renameat2(
            self.0.as_fd(),
            from,
            dest.0.as_fd(),
            to,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => Ok(()),
            Err(nix::errno::Errno::EINVAL) => {
                nix::unistd::linkat(
                    self.0.as_fd(),
                    from,
                    dest.0.as_fd(),
                    to,
                    nix::fcntl::AtFlags::empty(),
                )?;
                self.remove_file(from)
            }
            Err(e) => Err(e.into()),
        }
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
        // No-replace rename: EEXIST, both files intact.
        std::fs::write(t.path().join("a"), b"a").unwrap();
        std::fs::write(t.path().join("sub/a"), b"b").unwrap();
        let e = d.rename_noreplace("a", &s, "a").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        assert_eq!(std::fs::read(t.path().join("sub/a")).unwrap(), b"b");
        d.rename_noreplace("a", &s, "b").unwrap();
        assert!(!d.contains("a").unwrap() && s.contains("b").unwrap());
        assert!(d.contains("link").unwrap(), "a symlink counts as present");
        assert_eq!(
            d.create_new("link").unwrap_err().raw_os_error(),
            Some(libc::EEXIST)
        );
        // A symlink at any level of a walk is refused, creating or not.
        std::os::unix::fs::symlink(t.path(), t.path().join("sub/up")).unwrap();
        // (O_DIRECTORY|O_NOFOLLOW on a symlink is ENOTDIR on Linux, ELOOP elsewhere.)
        let refused = |e: io::Error| matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR));
        for create in [false, true] {
            assert!(refused(d.walk(&["sub", "up", "x"], create).unwrap_err()));
            assert!(refused(d.walk(&["dirlink", "x"], create).unwrap_err()));
            assert!(!t.path().join("x").exists(), "created through a link");
        }
        assert_eq!(d.kind("link").unwrap(), Some(Kind::Symlink));
        assert_eq!(d.kind("dirlink").unwrap(), Some(Kind::Symlink));
        assert_eq!(d.kind("sub").unwrap(), Some(Kind::Dir));
        assert_eq!(s.kind("f").unwrap(), Some(Kind::File));
        assert_eq!(d.kind("absent").unwrap(), None);
        d.walk(&["sub", "n1", "n2"], true).unwrap();
        assert!(t.path().join("sub/n1/n2").is_dir());
        let (avail, total) = space(t.path()).unwrap();
        assert!(total > 0 && avail <= total);
    }
}

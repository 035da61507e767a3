//! Advisory locks on directories: `flock(2)` on a read-only descriptor of the directory
//! itself.
//!
//! Why the directory and not a lock file: a table directory belongs to Cassandra, and any
//! file cleave leaves in it must be one Cassandra understands. `flock` on the directory's
//! own inode needs no file, and the kernel releases it when the holder dies (SIGKILL, power
//! loss), so a crashed cleave never leaves a stale lock behind. Locks taken through two
//! descriptors of the same inode conflict even inside one process (`flock` locks belong to
//! the open file description), so callers lock each distinct inode once (`lock_dirs`).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// A held exclusive lock; released on drop (or by the kernel when the process dies).
#[derive(Debug)]
pub struct DirLock {
    pub dir: PathBuf,
    _lock: Flock<File>,
}

/// Why a lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it; `holder` is its pid when `/proc/locks` names it.
    Busy {
        dir: PathBuf,
        holder: Option<u32>,
    },
    Io {
        dir: PathBuf,
        error: std::io::Error,
    },
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Busy { dir, holder } => write!(
                f,
                "another cleave{} is working in {}: one split or recover at a time per table directory and per --out (retry when it has finished)",
                holder.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                dir.display()
            ),
            LockError::Io { dir, error } => write!(f, "locking {}: {error}", dir.display()),
        }
    }
}

impl std::error::Error for LockError {}

/// Takes an exclusive lock on `dir` without waiting.
pub fn try_lock_dir(dir: &Path) -> Result<DirLock, LockError> {
    let io = |error| LockError::Io {
        dir: dir.to_path_buf(),
        error,
    };
    let f = File::open(dir).map_err(io)?;
    let ino = f.metadata().map_err(io)?.ino();
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(DirLock {
            dir: dir.to_path_buf(),
            _lock: l,
        }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(LockError::Busy {
            dir: dir.to_path_buf(),
            holder: flock_holder(ino),
        }),
        Err((_, e)) => Err(io(std::io::Error::from(e))),
    }
}

/// Locks every distinct directory of `dirs` (the same inode once), in inode order so that
/// two callers locking overlapping sets never wait on each other in a cycle.
pub fn lock_dirs(dirs: &[&Path]) -> Result<Vec<DirLock>, LockError> {
    let mut keyed = Vec::new();
    for d in dirs {
        let m = std::fs::metadata(d).map_err(|error| LockError::Io {
            dir: d.to_path_buf(),
            error,
        })?;
        keyed.push(((m.dev(), m.ino()), *d));
    }
    keyed.sort_by_key(|k| k.0);
    keyed.dedup_by_key(|k| k.0);
    keyed.into_iter().map(|(_, d)| try_lock_dir(d)).collect()
}

/// The pid holding a FLOCK on inode `ino`, from `/proc/locks`
/// (`1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`).
fn flock_holder(ino: u64) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    parse_proc_locks(&text, ino)
}

fn parse_proc_locks(text: &str, ino: u64) -> Option<u32> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // A blocked waiter's line starts with "->"; skip it.
        if f.len() < 6 || f[1] != "FLOCK" {
            return None;
        }
        let line_ino: u64 = f[5].rsplit(':').next()?.parse().ok()?;
        (line_ino == ino).then(|| f[4].parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_on_a_directory_is_busy_until_the_first_is_dropped() {
        let d = tempfile::tempdir().unwrap();
        let a = try_lock_dir(d.path()).unwrap();
        match try_lock_dir(d.path()) {
            Err(LockError::Busy { holder, .. }) => {
                assert_eq!(holder, Some(std::process::id()), "/proc/locks names us")
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(a);
        assert!(try_lock_dir(d.path()).is_ok());
    }

    #[test]
    fn the_same_directory_twice_is_locked_once() {
        let d = tempfile::tempdir().unwrap();
        let locks = lock_dirs(&[d.path(), d.path()]).unwrap();
        assert_eq!(locks.len(), 1);
    }

    #[test]
    fn proc_locks_lines() {
        let t = "1: FLOCK  ADVISORY  WRITE 4242 08:01:77 0 EOF\n1: -> FLOCK  ADVISORY  WRITE 9 08:01:77 0 EOF\n";
        assert_eq!(parse_proc_locks(t, 77), Some(4242));
        assert_eq!(parse_proc_locks(t, 78), None);
    }
}

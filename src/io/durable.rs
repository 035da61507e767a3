//! Durable writes for sstables: every component written, then all of them fsynced together
//! on a small pool of threads, then each TOC.txt written and fsynced, then the directories.
//!
//! Why TOC last: a reader that finds a TOC finds a complete sstable (cleave's `recover`,
//! and Cassandra's `SSTable.readTOC` lists the components it then opens). Why a pool:
//! an fsync is a round trip to the device (a journal commit on XFS); 8 children of ~8 files
//! each are ~64 of them, which issued one after another cost their sum, while issued
//! concurrently the filesystem folds them into few journal commits (docs/split.md,
//! "Durability", has the measurement). `syncfs` would be one call, but it also flushes
//! every dirty page of the filesystem — on a node's data disk, Cassandra's own. So a batch
//! skips its fsyncs (`Batch::deferred`) only where the caller holds the proof that Cassandra
//! is stopped and makes the whole result durable with one `syncfs` before its transaction
//! commits (`split::publish::Durability`, docs/split.md "Durability").

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many fsyncs run at once.
pub const SYNC_THREADS: usize = 8;

/// Files written but not yet durable, and the TOCs to write once they are.
#[derive(Default)]
pub struct Batch {
    pending: Vec<(PathBuf, File, bool)>,
    last: Vec<(PathBuf, Vec<u8>)>,
    dirs: Vec<PathBuf>,
    /// Nothing is fsynced: the caller makes the files durable with one `syncfs` later.
    deferred: bool,
}

/// An error of one file of the batch.
#[derive(Debug)]
pub struct BatchError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// A batch whose `commit` writes every file (TOCs last) but fsyncs none: the caller
    /// promises a `syncfs` of the filesystem before anything depends on them being durable
    /// (a Replace with Cassandra stopped: `split::publish::Durability::SyncFs`).
    pub fn deferred() -> Batch {
        Batch {
            deferred: true,
            ..Batch::default()
        }
    }

    /// Creates `path` (it must not exist) with `bytes`; durable at `commit`.
    pub fn file(&mut self, path: &Path, bytes: &[u8]) -> Result<(), BatchError> {
        self.write(path, bytes, true)
    }

    /// Creates or truncates `path` with `bytes`; durable at `commit` (`cleave gen`).
    pub fn overwrite(&mut self, path: &Path, bytes: &[u8]) -> Result<(), BatchError> {
        self.write(path, bytes, false)
    }

    fn write(&mut self, path: &Path, bytes: &[u8], new: bool) -> Result<(), BatchError> {
        let err = |source| BatchError {
            path: path.to_path_buf(),
            source,
        };
        let mut o = File::options();
        o.write(true);
        if new {
            o.create_new(true);
        } else {
            o.create(true).truncate(true);
        }
        let mut f = o.open(path).map_err(err)?;
        f.write_all(bytes).map_err(err)?;
        self.pending.push((path.to_path_buf(), f, false));
        Ok(())
    }

    /// A file written elsewhere (Data.db, Index.db): durable at `commit`; with `drop_cache`
    /// its pages leave the page cache once synced (nothing reads them soon, and they would
    /// evict Cassandra's hot pages; `NativeLibrary.trySkipCache` does the same).
    pub fn adopt(&mut self, path: &Path, file: File, drop_cache: bool) {
        self.pending.push((path.to_path_buf(), file, drop_cache));
    }

    /// Written only after every other file of the batch is durable (TOC.txt).
    pub fn last(&mut self, path: &Path, bytes: Vec<u8>) {
        self.last.push((path.to_path_buf(), bytes));
    }

    /// A directory to fsync at the very end (names created in it become durable).
    pub fn dir(&mut self, dir: &Path) {
        if !self.dirs.iter().any(|d| d == dir) {
            self.dirs.push(dir.to_path_buf());
        }
    }

    /// Files waiting for an fsync.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Makes the pending files durable now (bounding open descriptors in a long split).
    pub fn sync_pending(&mut self) -> Result<(), BatchError> {
        let files = std::mem::take(&mut self.pending);
        if self.deferred {
            // Closed unsynced; their pages stay dirty until the caller's syncfs.
            return Ok(());
        }
        sync_parallel(&files, SYNC_THREADS, Sync::All)
    }

    /// Pending files durable, then each `last` file written and durable, then directories.
    pub fn commit(mut self) -> Result<(), BatchError> {
        self.sync_pending()?;
        let mut tocs = Vec::with_capacity(self.last.len());
        for (path, bytes) in std::mem::take(&mut self.last) {
            let err = |source| BatchError {
                path: path.clone(),
                source,
            };
            // Truncating: `cleave gen` rewrites a TOC; a split's staging never has one.
            let mut f = File::options()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(err)?;
            f.write_all(&bytes).map_err(err)?;
            tocs.push((path, f, false));
        }
        if self.deferred {
            return Ok(());
        }
        sync_parallel(&tocs, SYNC_THREADS, Sync::All)?;
        let dirs: Vec<(PathBuf, File, bool)> = self
            .dirs
            .iter()
            .map(|d| {
                File::open(d)
                    .map(|f| (d.clone(), f, false))
                    .map_err(|source| BatchError {
                        path: d.clone(),
                        source,
                    })
            })
            .collect::<Result<_, _>>()?;
        sync_parallel(&dirs, SYNC_THREADS, Sync::All)
    }
}

/// `fsync` (data and metadata) or `fdatasync` (data, and metadata only as needed to read
/// it back: the size of a new file is, so for files written once the two differ little).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    All,
    Data,
}

/// Syncs `files` on up to `threads` threads; the first error wins.
pub fn sync_parallel(
    files: &[(PathBuf, File, bool)],
    threads: usize,
    how: Sync,
) -> Result<(), BatchError> {
    if files.is_empty() {
        return Ok(());
    }
    let threads = threads.clamp(1, files.len());
    let per = files.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(per)
            .map(|group| {
                s.spawn(move || {
                    for (path, f, drop) in group {
                        match how {
                            Sync::All => fsync(f),
                            Sync::Data => fdatasync(f),
                        }
                        .map_err(|source| BatchError {
                            path: path.clone(),
                            source,
                        })?;
                        if *drop {
                            super::fs::drop_cache(f, 0, 0);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let mut first = Ok(());
        for h in handles {
            let r = h.join().unwrap_or_else(|_| {
                Err(BatchError {
                    path: PathBuf::new(),
                    source: std::io::Error::other("fsync thread panicked"),
                })
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// How many fsync/fdatasync and syncfs calls this process made (`counts`): the split report
/// carries the difference over a run, so that a test and `cleave bench split` can tell an
/// offline Replace (one syncfs) from a per-file one without strace.
static FSYNCS: AtomicU64 = AtomicU64::new(0);
static SYNCFS: AtomicU64 = AtomicU64::new(0);

/// Durability calls made by this process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SyncCounts {
    /// fsync(2) and fdatasync(2) of files and directories.
    pub fsyncs: u64,
    /// syncfs(2) of a whole filesystem.
    pub syncfs: u64,
}

impl SyncCounts {
    /// The calls made between `before` and `self`.
    pub fn since(self, before: SyncCounts) -> SyncCounts {
        SyncCounts {
            fsyncs: self.fsyncs.saturating_sub(before.fsyncs),
            syncfs: self.syncfs.saturating_sub(before.syncfs),
        }
    }
}

/// The process's counts so far.
pub fn counts() -> SyncCounts {
    SyncCounts {
        fsyncs: FSYNCS.load(Ordering::Relaxed),
        syncfs: SYNCFS.load(Ordering::Relaxed),
    }
}

/// `fsync(2)` (data and metadata), counted.
pub fn fsync(f: &File) -> std::io::Result<()> {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    f.sync_all()
}

/// `fdatasync(2)`, counted.
pub fn fdatasync(f: &File) -> std::io::Result<()> {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    f.sync_data()
}

/// `syncfs(2)` of the filesystem holding `dir`: one call, but it writes back every dirty
/// page of that filesystem, Cassandra's own included when it is the node's data disk, and
/// forces the journal and a device cache flush (data, metadata and directory entries of
/// everything written before it are durable when it returns). Used only where Cassandra is
/// proven stopped (`split::publish::Durability::SyncFs`); measured by `cleave bench fsync`.
pub fn syncfs(dir: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = File::open(dir)?;
    SYNCFS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: plain syscall on an open descriptor.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toc_is_written_after_the_others_and_everything_lands() {
        // A deferred batch writes the same files; that it fsyncs none is shown by
        // tests/durability.rs, in a process of its own (the counters are per process).
        for mut b in [Batch::new(), Batch::deferred()] {
            let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            for i in 0..9 {
                b.file(&d.path().join(format!("f{i}")), &[i as u8; 10])
                    .unwrap_or_else(|e| panic!("{:?}", e.source));
            }
            b.last(&d.path().join("TOC.txt"), b"Data.db\n".to_vec());
            b.dir(d.path());
            assert!(!d.path().join("TOC.txt").exists(), "TOC waits for commit");
            b.commit().unwrap_or_else(|e| panic!("{:?}", e.source));
            assert_eq!(
                std::fs::read(d.path().join("f3")).unwrap_or_default(),
                [3u8; 10]
            );
            assert_eq!(
                std::fs::read(d.path().join("TOC.txt")).unwrap_or_default(),
                b"Data.db\n"
            );
        }
    }

    #[test]
    fn an_existing_file_is_refused() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(d.path().join("a"), b"x").unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batch::new();
        let e = b.file(&d.path().join("a"), b"y").err();
        assert!(e.is_some_and(|e| e.source.kind() == std::io::ErrorKind::AlreadyExists));
    }
}

//! One error enum per step of the pipeline (open → plan → write → check → publish), each
//! keeping its source and naming its stable `Reason`, and `SplitError`, which is any of
//! them. The reason is decided here, by type and errno, never by reading a message:
//! a full disk while writing a child is `InsufficientSpace`, a chunk that does not decode
//! is `CorruptSSTable`, and the two can no longer be confused.

use std::path::{Path, PathBuf};

use super::publish::{Blocker, Recovery};
use crate::io::lock::LockError;
use crate::reason::Reason;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::FormatError;

/// The reason of a format-layer error: what the bytes say (corrupt, unsupported), or for an
/// I/O error what the errno says (ENOSPC/EDQUOT, EACCES/EPERM, the rest).
pub fn format_reason(e: &FormatError) -> Reason {
    match e {
        FormatError::Corrupt { .. }
        | FormatError::Truncated { .. }
        | FormatError::Checksum { .. } => Reason::CorruptSSTable,
        FormatError::Unsupported { .. } => Reason::UnsupportedSSTable,
        FormatError::Io { source, .. } => Reason::of_io(source),
    }
}

/// The file a format-layer error names.
pub fn format_path(e: &FormatError) -> &Path {
    match e {
        FormatError::Corrupt { loc, .. }
        | FormatError::Truncated { loc, .. }
        | FormatError::Unsupported { loc, .. }
        | FormatError::Checksum { loc, .. } => &loc.file,
        FormatError::Io { file, .. } => file,
    }
}

/// `Parent::open`: the parent cannot be read or is not something cleave splits.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    SSTable(#[from] FormatError),
    /// SAI/SASI index the parent's row positions, which children do not keep.
    #[error("{path} has secondary-index component {component}: per-sstable indexes (SAI/SASI) index the parent's row positions and cannot be carried to children; rebuild them after splitting", path = .path.display())]
    SecondaryIndex { path: PathBuf, component: String },
    #[error("unsupported compressor {compressor} in {path}: cleave re-encodes chunks with LZ4, Snappy, Deflate, Zstd or Noop", path = .path.display())]
    Compressor { path: PathBuf, compressor: String },
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl OpenError {
    pub fn reason(&self) -> Reason {
        match self {
            OpenError::SSTable(e) => format_reason(e),
            OpenError::SecondaryIndex { .. } | OpenError::Compressor { .. } => {
                Reason::UnsupportedSSTable
            }
            OpenError::Io { source, .. } => Reason::of_io(source),
        }
    }
    pub fn path(&self) -> &Path {
        match self {
            OpenError::SSTable(e) => format_path(e),
            OpenError::SecondaryIndex { path, .. }
            | OpenError::Compressor { path, .. }
            | OpenError::Io { path, .. } => path,
        }
    }
}

/// `Parent::plan`: the request does not fit this parent, or its index does not read.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("invalid split request for {path}: {message}", path = .path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("{path} has no partitions", path = .path.display())]
    NoPartitions { path: PathBuf },
    /// Reading Index.db (the only I/O of planning).
    #[error(transparent)]
    Index(#[from] FormatError),
}

impl PlanError {
    pub fn reason(&self) -> Reason {
        match self {
            PlanError::Invalid { .. } | PlanError::NoPartitions { .. } => Reason::InvalidRequest,
            PlanError::Index(e) => format_reason(e),
        }
    }
    pub fn path(&self) -> &Path {
        match self {
            PlanError::Invalid { path, .. } | PlanError::NoPartitions { path } => path,
            PlanError::Index(e) => format_path(e),
        }
    }
}

/// `Plan::write`: the target is wrong, writing a child failed, or the parent's bytes did
/// not decode while being re-encoded.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// `--out` is not a directory on the parent's filesystem.
    #[error("--out {path}: {message}", path = .path.display())]
    Target { path: PathBuf, message: String },
    /// Creating staging, writing or syncing a child file (ENOSPC lands here).
    #[error("writing {path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Reading or decoding the parent, or an error of the format layer while writing.
    #[error(transparent)]
    Format(#[from] FormatError),
}

impl WriteError {
    pub fn io(path: &Path, source: std::io::Error) -> WriteError {
        WriteError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    pub fn reason(&self) -> Reason {
        match self {
            WriteError::Target { .. } => Reason::InvalidRequest,
            WriteError::Io { source, .. } => Reason::of_io(source),
            WriteError::Format(e) => format_reason(e),
        }
    }
    pub fn path(&self) -> &Path {
        match self {
            WriteError::Target { path, .. } | WriteError::Io { path, .. } => path,
            WriteError::Format(e) => format_path(e),
        }
    }
}

/// `Staged::check`: the children do not add up to the parent, or one fails its re-check.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("check failed, nothing published: children's (count, xor, sum) = ({}, {:016x}, {:016x}) differ from the parent's ({}, {:016x}, {:016x})", .children.count, .children.xor, .children.sum, .parent.count, .parent.xor, .parent.sum)]
    Fingerprint {
        path: PathBuf,
        parent: Fingerprint,
        children: Fingerprint,
    },
    #[error("check failed, nothing published: child {path} {what}: {source}", path = .path.display())]
    Child {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: FormatError,
    },
    #[error("check failed, nothing published: {path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl CheckError {
    pub fn reason(&self) -> Reason {
        match self {
            CheckError::Fingerprint { .. } | CheckError::Child { .. } => Reason::CheckFailed,
            CheckError::Io { source, .. } => Reason::of_io(source),
        }
    }
    pub fn path(&self) -> &Path {
        match self {
            CheckError::Fingerprint { path, .. }
            | CheckError::Child { path, .. }
            | CheckError::Io { path, .. } => path,
        }
    }
}

/// `Staged::publish` (and its pre-flight, run before anything is written).
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("--publish replace needs --out to be the parent's table directory {table_dir} (got {out})", table_dir = .table_dir.display(), out = .out.display())]
    NotTableDir { table_dir: PathBuf, out: PathBuf },
    #[error("process {pid} ({cmd}) has files under {dir} open or mapped: replace needs the node's Cassandra stopped (it would not see the children and could reuse their generation ids); use --publish stage and nodetool import --keep-repaired instead", dir = .dir.display())]
    CassandraRunning { dir: PathBuf, pid: u32, cmd: String },
    /// `split::guard`: cleave cannot see every process that could hold files under `dir`.
    #[error("{dir}: cannot rule out a running Cassandra: {why}", dir = .dir.display())]
    CassandraMayBeRunning { dir: PathBuf, why: String },
    #[error(transparent)]
    Format(#[from] FormatError),
    /// Another cleave holds the table directory or `--out` (`split::lock`, taken before the
    /// parent is opened and held until its children are published).
    #[error("{0}")]
    Busy(#[from] LockError),
    /// `split::intent`: a job uid, intent or outcome cleave will not act on.
    #[error("{path}: {what}", path = .path.display())]
    Pending { path: PathBuf, what: String },
    /// A transaction log cleave will not act on: nothing it names was deleted.
    #[error("{log}: refused, nothing deleted: {what}", log = .log.display())]
    Log { log: PathBuf, what: String },
    /// A directory whose paths Cassandra's transaction log cannot carry
    /// (`publish::check_log_path`): refused before anything is written.
    #[error("{path}: contains {found:?}, which Cassandra's transaction log cannot carry in a record's path (LogRecord separates its fields with ',' and '[', ']'): a log written there could not be read back, by cleave or by Cassandra's startup; move the data to a path without ',', '[', ']' or line breaks", path = .path.display())]
    LogUnsafePath { path: PathBuf, found: char },
    /// A `--publish stage` target that is a live table directory or already holds sstables
    /// (`publish::check_stage_out`): refused before anything is written.
    #[error("--out {out} refused, nothing written: {what}", out = .out.display())]
    StageOut { out: PathBuf, what: String },
    /// `recover` (or a roll-back) finished what it could; these files stop the rest.
    #[error("{}", blocked_message(.blocked))]
    Blocked {
        done: Vec<Recovery>,
        blocked: Vec<Blocker>,
    },
}

fn blocked_message(b: &[Blocker]) -> String {
    let list: Vec<String> = b.iter().map(|x| x.to_string()).collect();
    format!(
        "recovery is blocked by {} file(s), every other step is done (remove the obstacle, e.g. `chattr -i`, and run `cleave recover` again): {}",
        b.len(),
        list.join("; ")
    )
}

impl PublishError {
    pub fn reason(&self) -> Reason {
        match self {
            PublishError::NotTableDir { .. } => Reason::InvalidRequest,
            PublishError::CassandraRunning { .. } => Reason::CassandraRunning,
            PublishError::CassandraMayBeRunning { .. } => Reason::CassandraMayBeRunning,
            PublishError::Format(e) => format_reason(e),
            PublishError::Busy(LockError::Busy { .. }) => Reason::Busy,
            PublishError::Busy(LockError::Io { error, .. }) => Reason::of_io(error),
            // A log whose records name files outside its table, or that does not parse.
            PublishError::Log { .. } => Reason::CorruptSSTable,
            PublishError::Pending { .. } => Reason::InvalidRequest,
            PublishError::LogUnsafePath { .. } => Reason::InvalidRequest,
            PublishError::StageOut { .. } => Reason::InvalidRequest,
            PublishError::Blocked { blocked, .. } => blocked
                .first()
                .map_or(Reason::IoError, |b| Reason::of_io(&b.error)),
        }
    }
    pub fn path(&self) -> &Path {
        match self {
            PublishError::NotTableDir { out, .. } => out,
            PublishError::CassandraRunning { dir, .. }
            | PublishError::CassandraMayBeRunning { dir, .. } => dir,
            PublishError::Format(e) => format_path(e),
            PublishError::Busy(LockError::Busy { dir, .. } | LockError::Io { dir, .. }) => dir,
            PublishError::Log { log, .. } => log,
            PublishError::Pending { path, .. } => path,
            PublishError::LogUnsafePath { path, .. } => path,
            PublishError::StageOut { out, .. } => out,
            PublishError::Blocked { blocked, .. } => {
                blocked.first().map_or(Path::new(""), |b| b.path.as_path())
            }
        }
    }
}

/// Any step's error: what `split::run` returns, the CLI prints and the operator reports.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// A cleanup's own refusals (`split::cleanup`), before anything is written.
    #[error(transparent)]
    Cleanup(#[from] super::cleanup::CleanupError),
    /// The free-space pre-flight (`split::space`), before anything is written.
    #[error(transparent)]
    Space(#[from] super::space::SpaceError),
}

impl SplitError {
    /// The stable reason: the CLI's `error[<reason>]`, the CR condition reason, the metric label.
    pub fn reason(&self) -> Reason {
        match self {
            SplitError::Open(e) => e.reason(),
            SplitError::Plan(e) => e.reason(),
            SplitError::Write(e) => e.reason(),
            SplitError::Check(e) => e.reason(),
            SplitError::Publish(e) => e.reason(),
            SplitError::Cleanup(e) => e.reason(),
            SplitError::Space(e) => e.reason(),
        }
    }
    /// The file or directory the error is about.
    pub fn path(&self) -> &Path {
        match self {
            SplitError::Open(e) => e.path(),
            SplitError::Plan(e) => e.path(),
            SplitError::Write(e) => e.path(),
            SplitError::Check(e) => e.path(),
            SplitError::Publish(e) => e.path(),
            SplitError::Cleanup(e) => e.path(),
            SplitError::Space(e) => e.path(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(errno: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno)
    }

    #[test]
    fn a_full_disk_is_never_a_corrupt_sstable() {
        let p = Path::new("/x/nb-1-big-Data.db");
        for e in [
            SplitError::from(WriteError::io(p, io(libc::ENOSPC))),
            SplitError::from(WriteError::Format(FormatError::io(p, io(libc::EDQUOT)))),
            SplitError::from(PublishError::Format(FormatError::io(p, io(libc::ENOSPC)))),
        ] {
            assert_eq!(e.reason(), Reason::InsufficientSpace, "{e}");
            assert_eq!(e.path(), p);
        }
    }

    #[test]
    fn each_step_names_its_reason() {
        let p = Path::new("/x");
        let cases: Vec<(SplitError, Reason)> = vec![
            (
                OpenError::SSTable(FormatError::corrupt(p, Some(3), "bad")).into(),
                Reason::CorruptSSTable,
            ),
            (
                OpenError::SSTable(FormatError::unsupported(p, None, "bti")).into(),
                Reason::UnsupportedSSTable,
            ),
            (
                OpenError::Compressor {
                    path: p.into(),
                    compressor: "com.example.BrotliCompressor".into(),
                }
                .into(),
                Reason::UnsupportedSSTable,
            ),
            (
                PlanError::Invalid {
                    path: p.into(),
                    message: "m".into(),
                }
                .into(),
                Reason::InvalidRequest,
            ),
            (
                WriteError::io(p, io(libc::EACCES)).into(),
                Reason::PermissionDenied,
            ),
            (WriteError::io(p, io(libc::EIO)).into(), Reason::IoError),
            (
                CheckError::Fingerprint {
                    path: p.into(),
                    parent: Fingerprint::default(),
                    children: Fingerprint::default(),
                }
                .into(),
                Reason::CheckFailed,
            ),
            (
                PublishError::CassandraRunning {
                    dir: p.into(),
                    pid: 1,
                    cmd: "java".into(),
                }
                .into(),
                Reason::CassandraRunning,
            ),
        ];
        for (e, r) in cases {
            assert_eq!(e.reason(), r, "{e}");
        }
    }
}

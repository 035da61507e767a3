//! Publication: children are written into a staging directory on the parent's filesystem,
//! every file and the directory fsynced, then either left for import (`Stage`, moved into
//! `--out`) or swapped in for the parent (`Replace`) through a transaction log in
//! Cassandra's own format (`db/lifecycle/LogFile`, `LogRecord`), so that a crash at any
//! point leaves either the parent or all children live, and Cassandra's startup cleanup
//! (`LifecycleTransaction.removeUnfinishedLeftovers`) reaches the same verdict as
//! `cleave recover`.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub use super::error::PublishError;
pub use super::guard::CassandraStopped;
use crate::io::fs::sync_dir;
use crate::io::lock::DirLock;
use crate::sstable::{Component, Descriptor, FormatError, Result, SSTableId};

pub const STAGING_PREFIX: &str = ".cleave-staging-";

/// Where the children go once checked (`--publish`, `spec.publish`): the CRD's PascalCase
/// names; the CLI and the split report spell them in lowercase (`name`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub enum Publish {
    /// Leave the children in `--out` for `nodetool import --keep-repaired`; the parent is untouched.
    #[default]
    Stage,
    /// Children into the parent's table directory and the parent out, atomically.
    Replace,
    /// Children staged in the table's pending directory with an intent; `cleave
    /// apply-pending` publishes them before Cassandra's next start (`split::intent`).
    OnRestart,
}

impl Publish {
    /// The CLI's word for it (`--publish stage`), also the split report's.
    pub fn name(self) -> &'static str {
        match self {
            Publish::Stage => "stage",
            Publish::Replace => "replace",
            Publish::OnRestart => "on-restart",
        }
    }

    /// `serialize_with` for reports, which name the mode as the CLI does.
    pub fn serialize_name<S: serde::Serializer>(p: &Publish, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(p.name())
    }
}

/// How a split's files become durable (docs/split.md "Durability").
#[derive(Debug)]
pub enum Durability {
    /// An fsync a file, on the pool (`io::durable::Batch`), then of the directories: where
    /// Cassandra may be running (Stage, OnRestart's pend, a RangeStream's receive), since a
    /// `syncfs` would also write back every dirty page of Cassandra's own.
    PerFile,
    /// Nothing fsynced while writing; one `syncfs` of the data filesystem makes the
    /// children, the staging directories and the log's records durable before the renames
    /// that publish them (`replace_all`). Only a Replace has it, and only with the guard's
    /// proof that Cassandra is stopped.
    SyncFs(CassandraStopped),
}

impl Durability {
    pub fn is_syncfs(&self) -> bool {
        matches!(self, Durability::SyncFs(_))
    }
}

fn io_err(p: &Path) -> impl Fn(std::io::Error) -> FormatError + '_ {
    move |e| FormatError::io(p, e)
}

/// A fresh staging directory inside `out` (same filesystem, so renames are atomic); its name
/// is durable now, or with `Durability::SyncFs` at the syncfs before publication.
pub fn create_staging(out: &Path, durability: &Durability) -> Result<PathBuf> {
    let dir = out.join(format!("{STAGING_PREFIX}{}", uuid::Uuid::new_v4().simple()));
    fs::create_dir(&dir).map_err(io_err(&dir))?;
    if durability.is_syncfs() {
        return Ok(dir);
    }
    if let Err(e) = synced(out) {
        // The caller's guard only owns staging once this returns it.
        let _ = fs::remove_dir(&dir);
        return Err(e);
    }
    Ok(dir)
}

/// The next free sequence generation ids: above every sequence id of any sstable file in
/// the given directories (Cassandra's own supplier does `max + 1` per table directory,
/// `SequenceBasedSSTableId`). Children always get sequence ids, which every version reads.
pub fn next_generations(dirs: &[&Path], n: usize) -> Result<Vec<u32>> {
    let mut max = 0u32;
    for d in dirs {
        let Ok(rd) = fs::read_dir(d) else { continue };
        for e in rd {
            let e = e.map_err(io_err(d))?;
            if let Ok((desc, _)) = Descriptor::from_path(&e.path()) {
                if let SSTableId::Sequence(s) = desc.id {
                    max = max.max(s);
                }
            }
        }
    }
    // Ids already handed out by this process for the same first directory (`--out`): a
    // split sharing the table lock (`split::SplitLock`) may not have written them yet.
    static RESERVED: std::sync::Mutex<Vec<(PathBuf, u32)>> = std::sync::Mutex::new(Vec::new());
    let key = dirs
        .first()
        .map(|d| fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf()))
        .unwrap_or_default();
    let mut reserved = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, r)) = reserved.iter().find(|(k, _)| *k == key) {
        max = max.max(*r);
    }
    let gens: Result<Vec<u32>> = (1..=n as u32)
        .map(|i| {
            max.checked_add(i)
                .filter(|v| *v <= i32::MAX as u32)
                .ok_or_else(|| {
                    FormatError::corrupt(dirs[0], None, "no free sequence generation id below 2^31")
                })
        })
        .collect();
    let gens = gens?;
    if let Some(top) = gens.last() {
        match reserved.iter_mut().find(|(k, _)| *k == key) {
            Some((_, r)) => *r = (*r).max(*top),
            None => reserved.push((key, *top)),
        }
    }
    Ok(gens)
}

/// The files of one sstable in a directory, TOC.txt last (a reader that sees a TOC sees a
/// complete sstable).
pub fn sstable_files(dir: &Path, d: &Descriptor) -> Result<Vec<PathBuf>> {
    let prefix = d.file_name(&Component::Other(String::new()));
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|e| e.path())
        .collect();
    v.sort_by_key(|p| (p.to_string_lossy().ends_with("TOC.txt"), p.clone()));
    Ok(v)
}

/// `Stage`: moves each child's files from staging into `out` (TOC last) under a
/// transaction log in `out` (ADD records only), so that a crash leaves either none or all
/// of the children there once `recover` ran: before COMMIT it deletes what was ADDed,
/// after COMMIT there is nothing left to do but remove the log.
pub fn stage(
    staging: &Path,
    out: &Path,
    children: &[Descriptor],
) -> Result<Published, PublishError> {
    let staged: Vec<(PathBuf, Descriptor)> = children
        .iter()
        .map(|c| (staging.to_path_buf(), c.clone()))
        .collect();
    stage_all(out, &staged)
}

/// `stage` of children written into several staging directories of `out` (one per parent:
/// a cleanup stages every split sstable of a table), under one transaction log, so that
/// `out` holds all of them or none once `recover` ran.
pub fn stage_all(
    out: &Path,
    children: &[(PathBuf, Descriptor)],
) -> Result<Published, PublishError> {
    let finals: Vec<Descriptor> = children
        .iter()
        .map(|(_, c)| Descriptor {
            dir: out.to_path_buf(),
            ..c.clone()
        })
        .collect();
    check_log_path(out)?;
    let version = children.first().map_or("nb", |(_, c)| c.version.as_str());
    let log = out.join(log_file_name(version, TxnOperation::Split));
    let moved = (|| -> Result<(), PublishError> {
        for ((staging, c), d) in children.iter().zip(&finals) {
            let n = sstable_files(staging, c)?.len() as i32;
            append_line(&log, &log_record("ADD", &base_path(d)?, 0, n))?;
        }
        synced(out)?;
        for (staging, c) in children {
            for f in sstable_files(staging, c)? {
                let to = out.join(f.file_name().unwrap_or_default());
                crate::io::fault::io_point("stage:rename").map_err(io_err(&to))?;
                fs::rename(&f, &to).map_err(io_err(&to))?;
                crash_point("stage:renamed-file");
            }
        }
        synced(out)?;
        append_line(&log, &log_record("COMMIT", "", 0, 0))?;
        Ok(())
    })();
    if let Err(e) = moved {
        return Err(match roll_back(&log) {
            Ok(()) => e,
            Err(r) => PublishError::Log {
                log: log.clone(),
                what: format!(
                    "{e}; rolling back failed too ({r}): run `cleave recover {}`",
                    out.display()
                ),
            },
        });
    }
    crash_point("stage:committed");
    let mut left_behind = Vec::new();
    remove_stagings(children, &mut left_behind);
    if let Err(e) = fs::remove_file(&log) {
        left_behind.push(format!("log {}: {e}", log.display()));
    }
    if let Err(e) = synced(out) {
        left_behind.push(e.to_string());
    }
    Ok(Published {
        data_paths: finals.iter().map(|d| d.path(&Component::Data)).collect(),
        left_behind,
    })
}

/// Removes each distinct staging directory of `children` once they are published.
fn remove_stagings(children: &[(PathBuf, Descriptor)], left_behind: &mut Vec<String>) {
    let mut dirs: Vec<&PathBuf> = children.iter().map(|(s, _)| s).collect();
    dirs.sort();
    dirs.dedup();
    for staging in dirs {
        if let Err(e) = fs::remove_dir_all(staging) {
            if e.kind() != std::io::ErrorKind::NotFound {
                left_behind.push(format!("staging {}: {e}", staging.display()));
            }
        }
    }
}

/// Characters a record's path cannot hold. Cassandra reads a record with
/// `LogRecord.REGEX`, `^(add|remove|commit|abort):\[([^,]*),?([^,]*),?([^,]*)\]\[(\d*)\]$`
/// (3.0 to 5.0): a `,` in the path splits it into the time and file-count fields, so the
/// record does not parse (`Type.UNKNOWN`) and `LogFile.verify` fails the whole log, which
/// stops startup's `removeUnfinishedLeftovers`; `[` and `]` delimit the fields in
/// cleave's own reader (`parse_line`), and a line break ends the record (`LogFile` reads
/// lines). A log that cannot be read back is a transaction that can be neither finished
/// nor rolled back: children live beside their parents (issue 31, item 4).
pub const LOG_UNSAFE: &[char] = &[',', '[', ']', '\n', '\r'];

/// Refuses a directory whose sstables' paths a transaction log cannot carry
/// (`LOG_UNSAFE`), as the log records them: absolute and with symbolic links resolved
/// (`base_path`, Cassandra's `FileUtils.getCanonicalPath`). Called before anything is
/// written: by the CLI before a split or a cleanup starts, and by `stage_all` and
/// `replace_all` before their first record.
pub fn check_log_path(dir: &Path) -> Result<(), PublishError> {
    let canon = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    for p in [dir, canon.as_path()] {
        let s = p.to_string_lossy();
        if let Some(c) = s.chars().find(|c| LOG_UNSAFE.contains(c)) {
            return Err(PublishError::LogUnsafePath {
                path: p.to_path_buf(),
                found: c,
            });
        }
    }
    Ok(())
}

/// `dir` with symbolic links resolved as far as it exists (a staging root may not exist yet).
pub fn canonical_lenient(dir: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = dir;
    loop {
        if let Ok(c) = fs::canonicalize(at) {
            return rest.iter().rev().fold(c, |p: PathBuf, n| p.join(n));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                };
            }
            _ => return dir.to_path_buf(),
        }
    }
}

/// Why `dir` is a directory Cassandra would read sstables from or that already holds a
/// split's children: it holds sstable files (named as `Descriptor` parses them; the first
/// few are named). `None` for a directory without any, or that does not exist. (A name
/// `<table>-<id>` alone is not refused: an empty directory is how tests and operators
/// prepare an import.)
pub fn table_dir_evidence(dir: &Path) -> Option<String> {
    let rd = fs::read_dir(dir).ok()?;
    let mut found: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| Descriptor::from_path(&e.path()).is_ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    if !found.is_empty() {
        found.sort();
        let n = found.len();
        found.truncate(3);
        return Some(format!(
            "it holds {n} sstable file(s) ({}{})",
            found.join(", "),
            if n > 3 { ", ..." } else { "" }
        ));
    }
    None
}

/// Refuses a `--publish stage` target that is the parent's own table directory, or any
/// directory already holding sstables (another live table, a previous split's children). Stage publishes no transaction that takes the parent
/// out: children staged beside the parent are live beside it (every row twice) and take
/// the generation numbers a running Cassandra hands out next
/// (`SequenceBasedSSTableId.Builder` continues from the directory's highest); a second
/// set beside a previous split's children doubles the rows `nodetool import` brings in
/// (issue 31, item 5).
pub fn check_stage_out(out: &Path, table_dir: &Path) -> Result<(), PublishError> {
    let refuse = |what: String| PublishError::StageOut {
        out: out.to_path_buf(),
        what,
    };
    if canonical_lenient(out) == canonical_lenient(table_dir) {
        return Err(refuse(format!(
            "it is the parent's table directory {}: staged children would be live beside their parent (every row twice) under the generation numbers a running Cassandra hands out next; stage into an empty directory on the same filesystem, or use --publish replace (Cassandra stopped) or on-restart",
            table_dir.display()
        )));
    }
    if let Some(why) = table_dir_evidence(out) {
        return Err(refuse(format!(
            "{why}: a stage directory must hold no sstable (a previous split's children would be imported twice beside the new ones, and a live table directory would take the children as its own rows); stage into an empty directory"
        )));
    }
    Ok(())
}

/// One transaction-log record, `TYPE:[path,updateTime,numFiles][checksum]` where path is
/// the sstable's absolute path up to (without) the `-Component` part and the checksum is
/// CRC32 of path ‖ TYPE ‖ int(updateTime) ‖ int(updateTime >>> 32) ‖ int(numFiles)
/// (`LogRecord.format`, `computeChecksum`). Only REMOVE records keep an update time.
pub fn log_record(kind: &str, path: &str, update_time: i64, num_files: i32) -> String {
    let mut h = crc32fast::Hasher::new();
    h.update(path.as_bytes());
    h.update(kind.as_bytes());
    h.update(&(update_time as i32).to_be_bytes());
    h.update(&((update_time as u64 >> 32) as i32).to_be_bytes());
    h.update(&num_files.to_be_bytes());
    format!(
        "{kind}:[{path},{update_time},{num_files}][{}]",
        h.finalize()
    )
}

fn base_path(d: &Descriptor) -> Result<String> {
    let data = d.path(&Component::Data);
    let abs = fs::canonicalize(&d.dir).map_err(io_err(&d.dir))?;
    let name = d.file_name(&Component::Data);
    let base = name.strip_suffix("-Data.db").unwrap_or(&name);
    abs.join(base)
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| FormatError::corrupt(&data, None, "path is not UTF-8"))
}

fn append_line(log: &Path, line: &str) -> Result<()> {
    append(log, line, true)
}

/// `append_line`, leaving the record's durability to a later `syncfs` when `sync` is false.
fn append(log: &Path, line: &str, sync: bool) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io_err(log))?;
    // One write for the line and its newline: a crash leaves at most one torn last line.
    crate::io::fault::io_point("txn:append").map_err(io_err(log))?;
    f.write_all(format!("{line}\n").as_bytes())
        .map_err(io_err(log))?;
    crash_point("txn:record-written");
    if sync {
        crate::io::durable::fsync(&f).map_err(io_err(log))?;
        crash_point("txn:record-synced");
    }
    Ok(())
}

/// Processes whose open files or memory maps lie under `data_root`: a running Cassandra
/// cannot see files created behind its back and would collide on generation ids, so
/// `Replace` refuses while any exists. Matched by device and inode, so a holder in another
/// mount namespace or through a bind mount counts (`io::proc::holders`).
pub fn processes_holding(data_root: &Path) -> Vec<(u32, String)> {
    crate::io::proc::holders(data_root)
        .into_iter()
        .map(|h| (h.pid, h.cmd))
        .collect()
}

/// Crash injection for tests (`CLEAVE_CRASH_AT=<point>`, see `io::fault`): the points of
/// `replace` keep their historical short names (logged, renamed, committed).
fn crash_point(point: &str) {
    crate::io::fault::point(point);
}

/// fsync of a directory between two fault points, so a campaign can kill on either side.
fn synced(dir: &Path) -> Result<()> {
    crate::io::fault::io_point("fsync:dir-before").map_err(io_err(dir))?;
    sync_dir(dir).map_err(io_err(dir))?;
    crash_point("fsync:dir-after");
    Ok(())
}

/// `syncfs` of the filesystem holding `dir`, where a directory fsync stood before the
/// syncfs took its place (and more): the same fault points, so the campaigns reach a
/// failure and a kill at that step as they did.
fn synced_fs(dir: &Path) -> Result<()> {
    crate::io::fault::io_point("fsync:dir-before").map_err(io_err(dir))?;
    crate::io::durable::syncfs(dir).map_err(io_err(dir))?;
    crash_point("fsync:dir-after");
    Ok(())
}

/// One file `recover` (or the forward half of `replace`) could not remove.
#[derive(Debug, serde::Serialize)]
pub struct Blocker {
    /// The transaction log that names it.
    pub log: PathBuf,
    pub path: PathBuf,
    #[serde(serialize_with = "serialize_io_error")]
    pub error: std::io::Error,
}

fn serialize_io_error<S: serde::Serializer>(e: &std::io::Error, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&e.to_string())
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.is_dir() => " (a directory)",
            Ok(m) if m.file_type().is_symlink() => " (a symbolic link)",
            Ok(m) if !m.is_file() => " (not a regular file)",
            _ => "",
        };
        write!(f, "{}{what}: {}", self.path.display(), self.error)
    }
}

/// The locks a split holds from choosing generation ids until its children are published:
/// the parent's table directory and `--out` (one lock when they are the same directory).
/// Without them two splits of one table pick the same generations and the later renames
/// overwrite the earlier children.
pub fn lock_for_split(parent_dir: &Path, out: &Path) -> Result<Vec<DirLock>, PublishError> {
    Ok(crate::io::lock::lock_dirs(&[parent_dir, out])?)
}

/// The transaction-log operation of a split: `OperationType.fileName` of the Cassandra
/// operation it stands for, because `LogFile.make` parses the name with
/// `OperationType.fromFileName`, which throws on anything else, and a log Cassandra cannot
/// parse stops its startup cleanup. Both names exist, spelled the same, in 3.0, 3.11, 4.0,
/// 4.1 and 5.0 (docs/reliability.md cites the enum per version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOperation {
    /// `OperationType.UNKNOWN` ("Unknown compaction type"): what Cassandra's own offline
    /// `SSTableSplitter` (sstablesplit) logs.
    Split,
    /// `OperationType.ANTICOMPACTION` ("Anticompaction after repair").
    Anticompaction,
    /// `OperationType.CLEANUP` ("Cleanup", file name `cleanup`): what `nodetool cleanup`
    /// logs (`CompactionManager.performCleanup`), so a Cassandra starting mid-way sees an
    /// operation it knows.
    Cleanup,
}

impl TxnOperation {
    /// From `SplitOptions::operation` ("split" / "anticompaction", or a file name).
    pub fn from_name(s: &str) -> TxnOperation {
        match s {
            "anticompaction" | "anticompactionafterrepair" => TxnOperation::Anticompaction,
            "cleanup" => TxnOperation::Cleanup,
            _ => TxnOperation::Split,
        }
    }

    pub fn file_name(self) -> &'static str {
        match self {
            TxnOperation::Split => "unknowncompactiontype",
            TxnOperation::Anticompaction => "anticompactionafterrepair",
            TxnOperation::Cleanup => "cleanup",
        }
    }
}

/// `<version>_txn_<operation>_<timeuuid>.log`, Cassandra's `LogFile.getFileName`; its
/// reader matches `^(.{2})_txn_(.*)_(.*)\.log$` and parses the last group as a UUID.
pub fn log_file_name(version: &str, op: TxnOperation) -> String {
    format!(
        "{version}_txn_{}_{}.log",
        op.file_name(),
        uuid::Uuid::now_v1(&[0x63, 0x6c, 0x65, 0x61, 0x76, 0x65])
    )
}

/// Whether a file name is a transaction log by Cassandra's `LogFile.FILE_REGEX`.
pub fn is_log_name(name: &str) -> bool {
    let Some(rest) = name.strip_suffix(".log") else {
        return false;
    };
    rest.len() > 7
        && rest.is_char_boundary(2)
        && rest[2..].starts_with("_txn_")
        && rest[7..].contains('_')
}

/// What a finished `Stage` or `Replace` published, and what it could not clean up after
/// COMMIT (the children are live either way; a committed log that still has work stays for
/// `recover` or Cassandra's startup cleanup to finish).
#[derive(Debug, Default)]
pub struct Published {
    pub data_paths: Vec<PathBuf>,
    pub left_behind: Vec<String>,
}

/// `Replace`: ADD children, REMOVE parent, move children in, COMMIT, delete the parent,
/// delete the log. A failure before COMMIT rolls itself back (children out, log gone, the
/// parent exactly as it was); after COMMIT it always goes forward and reports what it could
/// not remove instead of failing. A crash is finished the same way by `recover`.
pub fn replace(
    staging: &Path,
    table_dir: &Path,
    parent: &Descriptor,
    children: &[Descriptor],
    op: &str,
    stopped: &CassandraStopped,
) -> Result<Published, PublishError> {
    let staged: Vec<(PathBuf, Descriptor)> = children
        .iter()
        .map(|c| (staging.to_path_buf(), c.clone()))
        .collect();
    replace_all(
        table_dir,
        &staged,
        std::slice::from_ref(parent),
        TxnOperation::from_name(op),
        stopped,
    )
}

/// `replace` of several parents at once, in one transaction: every child (each from its
/// staging directory) ADDed, every parent REMOVEd — a cleanup's split and dropped
/// sstables of one table — so a crash leaves either all parents or all children live.
/// `children` may be empty (a cleanup that only drops sstables).
///
/// `stopped` is the guard's proof that no Cassandra runs on the table: it is what allows a
/// Replace at all, and what lets one `syncfs` stand for an fsync a file (the children may
/// arrive unsynced, `Durability::SyncFs`). The flushes that remain, each ordering two
/// steps a power cut must not reverse (docs/split.md "Durability"):
/// 1. `syncfs` after the ADD/REMOVE records: children, staging and records durable before
///    any rename can be (a child renamed into the table with no durable ADD would be live
///    beside its parent);
/// 2. the table directory after the renames: every child in place before COMMIT can be;
/// 3. the log after COMMIT: committed before any parent file goes;
/// 4. the table directory after the parents' deletion: gone before the log is (a log
///    removed first would let a power cut bring the parent back beside its children).
///
/// The log's removal is not synced: a power cut that brings back the committed log leaves
/// what a crash right after COMMIT leaves, which `recover` and Cassandra's startup finish.
pub fn replace_all(
    table_dir: &Path,
    children: &[(PathBuf, Descriptor)],
    parents: &[Descriptor],
    op: TxnOperation,
    _stopped: &CassandraStopped,
) -> Result<Published, PublishError> {
    check_log_path(table_dir)?;
    let version = parents
        .first()
        .or(children.first().map(|(_, c)| c))
        .map_or("nb", |d| d.version.as_str());
    let log = table_dir.join(log_file_name(version, op));
    let finals: Vec<Descriptor> = children
        .iter()
        .map(|(_, c)| Descriptor {
            dir: table_dir.to_path_buf(),
            ..c.clone()
        })
        .collect();
    if let Err(e) = before_commit(table_dir, parents, children, &finals, &log) {
        return Err(match roll_back(&log) {
            Ok(()) => e,
            Err(r) => PublishError::Log {
                log: log.clone(),
                what: format!(
                    "{e}; rolling back failed too ({r}): run `cleave recover {}`",
                    table_dir.display()
                ),
            },
        });
    }
    crash_point("committed");
    let mut left_behind = Vec::new();
    let mut removed_all = true;
    match parse_log(&log) {
        Ok((recs, _)) => {
            for r in recs.iter().filter(|r| r.kind == "REMOVE") {
                for b in delete_sstable_prefix(&log, &r.path) {
                    removed_all = false;
                    left_behind.push(format!("parent file {b}"));
                }
            }
        }
        Err(e) => {
            removed_all = false;
            left_behind.push(format!("re-reading the committed log: {e}"));
        }
    }
    if let Err(e) = synced(table_dir) {
        left_behind.push(e.to_string());
    }
    remove_stagings(children, &mut left_behind);
    if removed_all {
        if let Err(e) = fs::remove_file(&log) {
            left_behind.push(format!("log {}: {e}", log.display()));
        }
    } else {
        left_behind.push(format!(
            "the committed transaction log {} stays: `cleave recover {}` (or Cassandra's startup cleanup) deletes the rest of the parent once the obstacle is gone",
            log.display(),
            table_dir.display()
        ));
    }
    Ok(Published {
        data_paths: finals.iter().map(|d| d.path(&Component::Data)).collect(),
        left_behind,
    })
}

/// The reversible half of `replace`: the log's ADD and REMOVE records, the renames, COMMIT.
fn before_commit(
    table_dir: &Path,
    parents: &[Descriptor],
    children: &[(PathBuf, Descriptor)],
    finals: &[Descriptor],
    log: &Path,
) -> Result<(), PublishError> {
    for ((staging, c), d) in children.iter().zip(finals) {
        let n = sstable_files(staging, c)?.len() as i32;
        append(log, &log_record("ADD", &base_path(d)?, 0, n), false)?;
    }
    for parent in parents {
        let parent_files = sstable_files(&parent.dir, parent)?;
        let mut mtime_ms = 0i64;
        for f in &parent_files {
            let m = fs::metadata(f).map_err(io_err(f))?;
            mtime_ms = mtime_ms.max(m.mtime() * 1000 + m.mtime_nsec() / 1_000_000);
        }
        append(
            log,
            &log_record(
                "REMOVE",
                &base_path(parent)?,
                mtime_ms,
                parent_files.len() as i32,
            ),
            false,
        )?;
    }
    synced_fs(table_dir)?;
    crash_point("logged");
    for (staging, c) in children {
        for f in sstable_files(staging, c)? {
            let to = table_dir.join(f.file_name().unwrap_or_default());
            crate::io::fault::io_point("replace:rename").map_err(io_err(&to))?;
            fs::rename(&f, &to).map_err(io_err(&to))?;
            crash_point("replace:renamed-file");
        }
    }
    synced(table_dir)?;
    crash_point("renamed");
    append_line(log, &log_record("COMMIT", "", 0, 0))?;
    Ok(())
}

/// Undoes an uncommitted `replace`: deletes what the log ADDs, then the log. If the log
/// turns out committed (a COMMIT that reached the file although its write reported an
/// error), nothing is rolled back: the caller's error stands and `recover` goes forward.
fn roll_back(log: &Path) -> Result<(), PublishError> {
    if !log.exists() {
        return Ok(());
    }
    let (recs, committed) = parse_log(log)?;
    if committed {
        return Err(PublishError::Log {
            log: log.to_path_buf(),
            what: "the log is committed although appending COMMIT failed".into(),
        });
    }
    let dir = log.parent().unwrap_or(Path::new("."));
    let mut blocked = Vec::new();
    for r in recs.iter().filter(|r| r.kind == "ADD") {
        blocked.extend(delete_sstable_prefix(log, &r.path));
    }
    if !blocked.is_empty() {
        return Err(PublishError::Blocked {
            done: Vec::new(),
            blocked,
        });
    }
    synced(dir)?;
    fs::remove_file(log).map_err(io_err(log))?;
    synced(dir)?;
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    kind: String,
    path: String,
}

fn parse_line(line: &str) -> Option<(String, String, i64, i32, String)> {
    let (kind, rest) = line.split_once(":[")?;
    let (fields, crc) = rest.split_once("][")?;
    let crc = crc.strip_suffix(']')?;
    let mut f = fields.splitn(3, ',');
    let (path, t, n) = (f.next()?, f.next()?, f.next()?);
    Some((
        kind.to_ascii_uppercase(),
        path.to_string(),
        t.parse().ok()?,
        n.parse().ok()?,
        crc.to_string(),
    ))
}

fn parse_log(log: &Path) -> Result<(Vec<Record>, bool)> {
    let text = fs::read_to_string(log).map_err(io_err(log))?;
    let lines: Vec<&str> = text.lines().collect();
    let mut recs = Vec::new();
    let mut committed = false;
    for (i, line) in lines.iter().enumerate() {
        let ok = parse_line(line).filter(|(kind, path, t, n, crc)| {
            log_record(kind, path, *t, *n).ends_with(&format!("[{crc}]"))
        });
        let Some((kind, path, _, _, _)) = ok else {
            // A torn last line (a crash while appending) leaves the transaction incomplete,
            // as Cassandra's LogFile also reads it; anything earlier is corruption.
            if i + 1 == lines.len() {
                break;
            }
            return Err(FormatError::corrupt(log, None, format!("line {}: expected TYPE:[path,time,files][crc] with a matching checksum, found {line:?}", i + 1)));
        };
        match kind.as_str() {
            "COMMIT" => committed = true,
            "ABORT" => committed = false,
            _ => recs.push(Record { kind, path }),
        }
    }
    Ok((recs, committed))
}

/// A record's path is acted on only if it names an sstable (`<version>-<id>-<format>`, as
/// `Descriptor` parses it) directly inside the log's own directory. A checksum is no
/// authentication (anyone can compute a CRC32), so without this a crafted log would make
/// `recover` delete `/elsewhere/important-*`.
fn check_record_path(log: &Path, dir_canon: &Path, path: &str) -> Result<(), PublishError> {
    let refuse = |what: String| PublishError::Log {
        log: log.to_path_buf(),
        what,
    };
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(refuse(format!("record path {path:?} is not absolute")));
    }
    let (Some(parent), Some(name)) = (p.parent(), p.file_name().and_then(|n| n.to_str())) else {
        return Err(refuse(format!("record path {path:?} has no file name")));
    };
    let parent_canon = fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
    if parent_canon != dir_canon || p.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(refuse(format!(
            "record path {path:?} is outside the table directory {}",
            dir_canon.display()
        )));
    }
    let parsed = Descriptor::from_path(&parent.join(format!("{name}-Data.db")));
    match parsed {
        Ok((d, _)) if d.file_name(&Component::Data) == format!("{name}-Data.db") => Ok(()),
        _ => Err(refuse(format!(
            "record path {path:?} does not name an sstable (<version>-<id>-<format>)"
        ))),
    }
}

/// Deletes every file of the sstable `prefix` (TOC first, so that a half-deleted sstable
/// is never taken for a complete one), carrying on past failures; returns what it could
/// not delete.
fn delete_sstable_prefix(log: &Path, prefix: &str) -> Vec<Blocker> {
    let p = Path::new(prefix);
    let dir = p.parent().unwrap_or(Path::new("."));
    let base = format!("{}-", p.file_name().and_then(|n| n.to_str()).unwrap_or(""));
    let blocker = |path: PathBuf, error| Blocker {
        log: log.to_path_buf(),
        path,
        error,
    };
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return vec![blocker(dir.to_path_buf(), e)],
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|f| f.starts_with(&base)))
        .map(|e| e.path())
        .collect();
    files.sort_by_key(|f| (!f.to_string_lossy().ends_with("TOC.txt"), f.clone()));
    let mut blocked = Vec::new();
    for f in files {
        match crate::io::fault::io_point("delete:file").and_then(|()| fs::remove_file(&f)) {
            Ok(()) => crash_point("delete:sstable-file"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => blocked.push(blocker(f, e)),
        }
    }
    blocked
}

/// What `recover` did with one transaction log.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Recovery {
    pub log: PathBuf,
    pub committed: bool,
    /// Sstables whose files were deleted: the parent (committed) or the children (not).
    pub removed: Vec<String>,
}

/// Finishes or rolls back every interrupted `Replace` in `table_dir`, as Cassandra's
/// startup would: a committed log deletes its REMOVE sstables, an uncommitted one its ADD
/// sstables. Every record is checked before anything is deleted (`check_record_path`);
/// a log that fails is refused whole. Leftover staging directories and reflink probes are
/// removed. Holds the directory's lock, so it never races a running split.
///
/// Everything that can be finished is; if some file cannot be removed, the log stays and
/// the error lists exactly which files block it.
pub fn recover(table_dir: &Path) -> Result<Vec<Recovery>, PublishError> {
    let _lock = crate::io::lock::try_lock_dir(table_dir)?;
    let dir_canon = fs::canonicalize(table_dir).map_err(io_err(table_dir))?;
    let mut logs: Vec<PathBuf> = fs::read_dir(table_dir)
        .map_err(io_err(table_dir))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_log_name)
        })
        .collect();
    logs.sort();
    let mut done = Vec::new();
    let mut blocked = Vec::new();
    for log in logs {
        let (recs, committed) = parse_log(&log)?;
        for r in &recs {
            check_record_path(&log, &dir_canon, &r.path)?;
        }
        let victim = if committed { "REMOVE" } else { "ADD" };
        let mut removed = Vec::new();
        let mut stuck = Vec::new();
        for r in recs.iter().filter(|r| r.kind == victim) {
            stuck.extend(delete_sstable_prefix(&log, &r.path));
            removed.push(r.path.clone());
        }
        synced(table_dir)?;
        if stuck.is_empty() {
            fs::remove_file(&log).map_err(io_err(&log))?;
            crash_point("recover:log-removed");
            synced(table_dir)?;
            done.push(Recovery {
                log,
                committed,
                removed,
            });
        } else {
            blocked.extend(stuck);
        }
    }
    remove_staging_dirs(table_dir)?;
    remove_stale_probes(table_dir)?;
    if blocked.is_empty() {
        Ok(done)
    } else {
        Err(PublishError::Blocked { done, blocked })
    }
}

/// Removes leftover staging directories of interrupted splits (their children were never
/// published). Callers hold the directory's lock, so no live split owns them.
pub fn remove_staging_dirs(dir: &Path) -> Result<usize> {
    remove_prefixed(dir, STAGING_PREFIX, true)
}

/// Removes the entries of `dir` whose name starts with `prefix` and that are directories
/// (`dirs`, removed whole) or regular files; syncs `dir` when something went.
fn remove_prefixed(dir: &Path, prefix: &str, dirs: bool) -> Result<usize> {
    let mut n = 0;
    for e in fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok())
    {
        let named = e
            .file_name()
            .to_str()
            .is_some_and(|s| s.starts_with(prefix));
        let kind = e
            .file_type()
            .is_ok_and(|t| if dirs { t.is_dir() } else { t.is_file() });
        if named && kind {
            let removed = if dirs {
                fs::remove_dir_all(e.path())
            } else {
                fs::remove_file(e.path())
            };
            removed.map_err(io_err(&e.path()))?;
            n += 1;
        }
    }
    if n > 0 {
        synced(dir)?;
    }
    Ok(n)
}

/// Reflink probe files that a version before the probe moved into staging left behind
/// when killed mid-probe.
pub const PROBE_PREFIX: &str = ".cleave-reflink-probe-";

fn remove_stale_probes(dir: &Path) -> Result<usize> {
    remove_prefixed(dir, PROBE_PREFIX, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_record_checksum_is_stable() {
        // CRC32 of "" ‖ "COMMIT" ‖ three zero ints.
        let mut h = crc32fast::Hasher::new();
        h.update(b"COMMIT");
        h.update(&[0u8; 12]);
        assert_eq!(
            log_record("COMMIT", "", 0, 0),
            format!("COMMIT:[,0,0][{}]", h.finalize())
        );
    }

    #[test]
    fn parse_round_trip_and_torn_tail() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("nb_txn_anticompaction_x.log");
        let a = log_record("ADD", "/t/nb-2-big", 0, 8);
        let r = log_record("REMOVE", "/t/nb-1-big", 1_700_000_000_123, 8);
        fs::write(&log, format!("{a}\n{r}\nCOMMIT:[,0,0][12")).unwrap();
        let (recs, committed) = parse_log(&log).unwrap();
        assert_eq!(recs.len(), 2);
        assert!(!committed, "a torn COMMIT line is not a commit");
        fs::write(&log, format!("{a}\nADD:[/t/nb-3-big,0,8][1]\n{r}\n")).unwrap();
        assert!(
            parse_log(&log).is_err(),
            "a bad checksum before the last line is corruption"
        );
    }
}

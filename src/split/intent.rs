//! `publish: OnRestart`: children staged beside a running Cassandra, published by
//! `cleave apply-pending` before the next start (an init container), as Medusa's restore
//! writes its files before Cassandra starts and so never races a live node.
//!
//! On the data volume, per table and job (docs/split.md "Publish on restart"):
//!
//! ```text
//! <table>/.cleave-pending/<job-uid>/intent.json      what to publish, and the parents' identity
//! <table>/.cleave-pending/<job-uid>/children-<gen>/  the checked, durable children of one parent
//! <table>/.cleave-pending/<job-uid>/applying.json    the children's final names (apply in flight)
//! <table>/.cleave-pending/<job-uid>/apply/           the children, hard-linked under fresh ids
//! <table>/.cleave-pending/<job-uid>/outcome.json     Complete or Failed, for the sidecar to read
//! ```
//!
//! Cassandra lists only the files of a table directory (`Directories.SSTableLister`), so a
//! hidden sub-directory is invisible to it, as `.cleave-staging-*` is. Every JSON file is
//! written tmp + fsync + rename + fsync dir (`io::fs::write_durable`); the intent goes away
//! only after the outcome is durable, so a crash at any point is finished by the next run.
//!
//! At apply time the children get fresh generation ids: while they waited, the live node
//! flushed and compacted and its counter (`SequenceBasedSSTableId`, max + 1 of the table
//! directory at startup) may have handed out theirs. They are hard-linked under the new
//! names into `apply/` (the originals stay, so a crash there loses nothing) and swapped in
//! for their parents by the crash-atomic `publish::replace_all` (transaction log, `recover`).

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::error::PublishError;
use super::publish::{self, Recovery, TxnOperation};
use super::report::SplitReport;
use super::staged::{self, Checked, Staged};
use crate::io::at::{Dir, Kind};
use crate::io::fault::point;
use crate::io::fs::{sync_dir, write_durable};
use crate::reason::Reason;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::table::CheckLevel;
use crate::sstable::{Component, Descriptor, FormatError, SSTable, SSTableId, Toc};

pub const PENDING_DIR: &str = ".cleave-pending";
pub const INTENT_FILE: &str = "intent.json";
pub const OUTCOME_FILE: &str = "outcome.json";
const APPLYING_FILE: &str = "applying.json";
const APPLY_DIR: &str = "apply";
/// The format of intent.json and outcome.json; a reader refuses a newer one.
pub const FORMAT_VERSION: u32 = 1;

/// What a parent was when its children were staged: apply-pending publishes only if it
/// still is (else `ParentChanged`). Compaction never rewrites an sstable in place, so a
/// changed inode, size or mtime means another file under the same name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentIdentity {
    /// The Data.db file name, e.g. `nb-5-big-Data.db`.
    pub data_file: String,
    pub size: u64,
    pub inode: u64,
    /// Data.db's mtime, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// `Digest.crc32:<its contents>` (the CRC32 of Data.db Cassandra wrote,
    /// `ChecksumType.CRC32` in `DataIntegrityMetadata`), or `Statistics.db:crc32=<hex>` (of
    /// the whole Statistics.db, which holds the sstable's metadata) when there is no Digest.
    pub checksum: String,
}

/// One file of a staged child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingFile {
    pub name: String,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingChild {
    /// The child's Data.db name in its children directory (its id changes at apply).
    pub data_file: String,
    pub files: Vec<PendingFile>,
    pub partitions: u64,
    pub repaired_at: Option<i64>,
    pub pending_repair: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingParent {
    pub parent: ParentIdentity,
    /// The directory of its children, inside the job's pending directory; empty for a
    /// parent that is removed with no children (a cleanup's wholly unowned sstable).
    pub children_dir: String,
    pub children: Vec<PendingChild>,
    /// The children's key fingerprint as `Staged::check` proved it (the parent's keys, or
    /// under cleanup its owned keys): apply-pending reads the staged children's keys again
    /// and publishes only if they still add up to it. Absent in an intent written before
    /// it was recorded (then each child's partition count is checked), for a parent
    /// removed with no children, and for a trie-only BTI split (`split::trie_only`: its
    /// fingerprint is over parent positions, not keys; the counts are checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<RecordedFingerprint>,
}

/// A key fingerprint in an intent: `sstable::fingerprint::Fingerprint`, hex as in reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedFingerprint {
    pub count: u64,
    pub xor: String,
    pub sum: String,
}

impl From<Fingerprint> for RecordedFingerprint {
    fn from(f: Fingerprint) -> Self {
        RecordedFingerprint {
            count: f.count,
            xor: format!("{:016x}", f.xor),
            sum: format!("{:016x}", f.sum),
        }
    }
}

/// `intent.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    pub version: u32,
    pub job_uid: String,
    /// `anticompaction`, `split`, `cleanup`: the transaction log's operation type.
    pub operation: String,
    /// Always true: the children carry the repair state cleave wrote (`repairedAt`,
    /// `pendingRepair`) and apply-pending moves them in unchanged, which is what
    /// `nodetool import --keep-repaired` does and a plain import does not.
    pub keep_repaired: bool,
    pub created_unix_ms: u64,
    pub parents: Vec<PendingParent>,
}

/// `outcome.json`: how apply-pending ended a job in one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub version: u32,
    pub job_uid: String,
    pub table_dir: PathBuf,
    pub operation: String,
    pub finished_unix_ms: u64,
    pub result: OutcomeResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state")]
pub enum OutcomeResult {
    /// The parents were replaced by these children (live Data.db paths).
    Complete {
        parents: Vec<String>,
        children: Vec<PathBuf>,
        /// The same children, per parent (the sidecar rewrites each job result with them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        by_parent: Vec<PublishedParent>,
    },
    /// Nothing was published and the children are gone; the parents are as they were.
    Failed { reason: Reason, message: String },
}

/// One parent's live children after apply-pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedParent {
    /// The parent's Data.db file name.
    pub parent: String,
    pub children: Vec<PathBuf>,
}

/// `children` (the intent's children in its order, as published) split per parent.
fn by_parent(intent: &Intent, children: &[PathBuf]) -> Vec<PublishedParent> {
    let mut rest = children;
    let mut v = Vec::with_capacity(intent.parents.len());
    for p in &intent.parents {
        let (mine, tail) = rest.split_at(p.children.len().min(rest.len()));
        rest = tail;
        v.push(PublishedParent {
            parent: p.parent.data_file.clone(),
            children: mine.to_vec(),
        });
    }
    v
}

impl Outcome {
    pub fn reason(&self) -> Option<Reason> {
        match &self.result {
            OutcomeResult::Complete { .. } => None,
            OutcomeResult::Failed { reason, .. } => Some(*reason),
        }
    }
}

/// What `Staged::pend` did.
#[derive(Debug, Serialize)]
pub struct PendReport {
    pub job_uid: String,
    pub intent: PathBuf,
    /// The parent's table directory, canonical.
    pub table_dir: PathBuf,
    pub children_dir: PathBuf,
    /// The split's report; its children's paths are in `children_dir`.
    pub split: SplitReport,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn pending(path: &Path, what: impl Into<String>) -> PublishError {
    PublishError::Pending {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> PublishError + '_ {
    move |e| PublishError::Format(FormatError::io(path, e))
}

/// A job uid names a directory: 1 to 64 of `[A-Za-z0-9_-]` (a Kubernetes uid, a UUID).
pub fn check_job_uid(uid: &str) -> Result<(), PublishError> {
    let ok = !uid.is_empty()
        && uid.len() <= 64
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(pending(
            Path::new(uid),
            format!("job uid {uid:?}: expected 1 to 64 letters, digits, '-' or '_'"),
        ))
    }
}

/// The pending directory of `job_uid` in `table_dir`.
pub fn job_dir(table_dir: &Path, job_uid: &str) -> PathBuf {
    table_dir.join(PENDING_DIR).join(job_uid)
}

/// The identity of the sstable whose Data.db is `data_path`, as recorded in an intent.
pub fn parent_identity(data_path: &Path) -> Result<ParentIdentity, FormatError> {
    let m = fs::metadata(data_path).map_err(|e| FormatError::io(data_path, e))?;
    let (d, _) = Descriptor::from_path(data_path)?;
    let digest = d.path(&Component::Digest);
    let checksum = match fs::read_to_string(&digest) {
        Ok(s) => format!("Digest.crc32:{}", s.trim()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let st = d.path(&Component::Statistics);
            let b = fs::read(&st).map_err(|e| FormatError::io(&st, e))?;
            format!("Statistics.db:crc32={:08x}", crc32fast::hash(&b))
        }
        Err(e) => return Err(FormatError::io(&digest, e)),
    };
    Ok(ParentIdentity {
        data_file: d.file_name(&Component::Data),
        size: m.len(),
        inode: m.ino(),
        mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        checksum,
    })
}

/// Why `now` is not the parent `was`, or `None` if it still is.
fn parent_difference(table_dir: &Path, was: &ParentIdentity) -> Option<String> {
    let path = table_dir.join(&was.data_file);
    let now = match parent_identity(&path) {
        Ok(n) => n,
        Err(e) => {
            return Some(format!(
                "{} is gone (compacted away or removed): {e}",
                path.display()
            ))
        }
    };
    let mut d = Vec::new();
    if now.inode != was.inode {
        d.push(format!("inode {} (intent: {})", now.inode, was.inode));
    }
    if now.size != was.size {
        d.push(format!("size {} (intent: {})", now.size, was.size));
    }
    if now.mtime_ns != was.mtime_ns {
        d.push(format!(
            "mtime {} ns (intent: {})",
            now.mtime_ns, was.mtime_ns
        ));
    }
    if now.checksum != was.checksum {
        d.push(format!(
            "checksum {} (intent: {})",
            now.checksum, was.checksum
        ));
    }
    (!d.is_empty()).then(|| format!("{} changed: {}", path.display(), d.join(", ")))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, PublishError> {
    let text = fs::read(path).map_err(io(path))?;
    serde_json::from_slice(&text).map_err(|e| pending(path, format!("does not parse: {e}")))
}

fn write_json<T: Serialize>(path: &Path, v: &T, what: &str) -> Result<(), PublishError> {
    let bytes = serde_json::to_vec_pretty(v).map_err(|e| pending(path, e.to_string()))?;
    write_durable(path, &bytes, what).map_err(io(path))
}

/// Reads an intent, refusing one of a newer format.
pub fn read_intent(path: &Path) -> Result<Intent, PublishError> {
    let i: Intent = read_json(path)?;
    check_version(path, "intent", i.version)?;
    Ok(i)
}

/// Reads an outcome, refusing one of a newer format.
fn read_outcome(path: &Path) -> Result<Outcome, PublishError> {
    let o: Outcome = read_json(path)?;
    check_version(path, "outcome", o.version)?;
    Ok(o)
}

/// A record written by a newer cleave is not acted on: its fields may mean more than this
/// one knows.
fn check_version(path: &Path, what: &str, version: u32) -> Result<(), PublishError> {
    if version > FORMAT_VERSION {
        return Err(pending(
            path,
            format!("{what} format {version} is newer than this cleave's {FORMAT_VERSION}"),
        ));
    }
    Ok(())
}

/// One process adds parents to an intent at a time (the operator splits several parents of
/// one table at once under one shared table lock).
static INTENT_UPDATE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Records `parents` (each with its staged children in `children_dir`, inside the job's
/// pending directory) in the job's intent in `table_dir` (canonical), creating it or
/// replacing earlier entries of the same parents, in one durable write: apply-pending
/// publishes every parent of one write or, if it never landed, none.
pub fn record(
    table_dir: &Path,
    job_uid: &str,
    operation: &str,
    parents: Vec<PendingParent>,
) -> Result<PathBuf, PublishError> {
    check_job_uid(job_uid)?;
    let _one = INTENT_UPDATE.lock().unwrap_or_else(|p| p.into_inner());
    let dir = open_job_dir(table_dir, job_uid)?;
    let path = dir.join(INTENT_FILE);
    let mut intent = if path.exists() {
        read_intent(&path)?
    } else {
        Intent {
            version: FORMAT_VERSION,
            job_uid: job_uid.to_string(),
            operation: operation.to_string(),
            keep_repaired: true,
            created_unix_ms: now_ms(),
            parents: Vec::new(),
        }
    };
    intent.parents.retain(|p| {
        !parents
            .iter()
            .any(|n| n.parent.data_file == p.parent.data_file)
    });
    intent.parents.extend(parents);
    write_json(&path, &intent, "intent")?;
    point("pend:intent-written");
    Ok(path)
}

/// The job's pending directory in `table` (canonical), created durably. Refused once the
/// job has an outcome there: apply-pending ended it, and a new round needs a new uid.
fn open_job_dir(table: &Path, job_uid: &str) -> Result<PathBuf, PublishError> {
    let job = job_dir(table, job_uid);
    if job.join(OUTCOME_FILE).exists() {
        return Err(pending(
            &job.join(OUTCOME_FILE),
            "this job already has an outcome: a new round needs a new job uid",
        ));
    }
    // Created and opened by descriptor, never through a symlink planted at either level.
    Dir::open_configured(table)
        .and_then(|t| t.walk(&[PENDING_DIR, job_uid], true))
        .map_err(io(&job))?;
    sync_dir(&table.join(PENDING_DIR)).map_err(io(&job))?;
    sync_dir(table).map_err(io(table))?;
    Ok(job)
}

/// `OnRestart` cleanup of an sstable that holds no owned key: an intent entry with no
/// children, so apply-pending removes it in the table's one transaction (a REMOVE without
/// an ADD, as Cassandra's own cleanup drops a wholly unowned sstable: `CompactionManager.
/// performCleanup`), and only if it is still the sstable recorded here.
pub fn dropped(data_path: &Path) -> Result<PendingParent, PublishError> {
    Ok(PendingParent {
        parent: parent_identity(data_path)?,
        children_dir: String::new(),
        children: Vec::new(),
        fingerprint: None,
    })
}

impl Staged<Checked> {
    /// `OnRestart`: the checked children move from staging into the job's pending
    /// directory of the parent's table and the intent records them; the parent stays live.
    /// Needs `--out` to be the parent's table directory (the children must be on its
    /// filesystem and apply-pending finds them there).
    pub fn pend(self, job_uid: &str) -> Result<PendReport, PublishError> {
        let operation = self.operation;
        let (parent, mut report) = self.pend_unrecorded(job_uid)?;
        report.intent = record(&report.table_dir, job_uid, operation, vec![parent])?;
        Ok(report)
    }

    /// [`Self::pend`] without the intent: the children moved into the job's pending
    /// directory and the entry that records them, for the caller to [`record`] with others
    /// (a cleanup records a table's parents in one write). Children no intent names are
    /// removed by the next apply-pending (`JobAction::RemovedIncomplete`) or `withdraw`.
    pub fn pend_unrecorded(
        mut self,
        job_uid: &str,
    ) -> Result<(PendingParent, PendReport), PublishError> {
        check_job_uid(job_uid)?;
        let table = fs::canonicalize(self.parent.dir()).map_err(io(self.parent.dir()))?;
        let out = fs::canonicalize(&self.out_dir).map_err(io(&self.out_dir))?;
        if out != table {
            return Err(PublishError::NotTableDir {
                table_dir: table,
                out,
            });
        }
        let job = open_job_dir(&table, job_uid)?;
        let pd = &self.parent.table().descriptor;
        let children_dir_name = format!("children-{}-{}", pd.version, pd.id);
        let children_dir = job.join(&children_dir_name);
        if children_dir.exists() {
            // An earlier pend of this parent for this job that its intent may name: the
            // intent is rewritten below to name these children instead.
            fs::remove_dir_all(&children_dir).map_err(io(&children_dir))?;
        }
        fs::rename(&self.staging, &children_dir).map_err(io(&children_dir))?;
        self.guard.disarm();
        sync_dir(&job).map_err(io(&job))?;
        sync_dir(&table).map_err(io(&table))?;
        point("pend:children-moved");
        let mut children = Vec::with_capacity(self.descs.len());
        for (d, r) in self.descs.iter().zip(&self.reports) {
            let d = Descriptor {
                dir: children_dir.clone(),
                ..d.clone()
            };
            let mut files = Vec::new();
            for f in publish::sstable_files(&children_dir, &d)? {
                let size = fs::metadata(&f).map_err(io(&f))?.len();
                files.push(PendingFile {
                    name: file_name(&f),
                    size,
                });
            }
            children.push(PendingChild {
                data_file: d.file_name(&Component::Data),
                files,
                partitions: r.partitions,
                repaired_at: r.repaired_at,
                pending_repair: r.pending_repair.clone(),
            });
        }
        let parent = PendingParent {
            parent: parent_identity(self.parent.data_path())?,
            children_dir: children_dir_name,
            children,
            // apply-pending re-reads the children's keys: a trie-only split's fingerprint
            // is not over keys, so only the partition counts are checked again.
            fingerprint: (self.plan_source != super::plan::PlanSource::PartitionsTrie)
                .then(|| self.children_fp.into()),
        };
        let mut split = staged::report(
            &self.parent,
            &self.plan,
            self.parent_fp,
            self.support,
            publish::Publish::OnRestart,
            false,
        );
        split.check = Some(super::report::Check {
            parent: self.parent_fp,
            children: self.children_fp,
            ok: true,
            by: super::report::FingerprintBy::of(self.plan_source),
        });
        split.children = std::mem::take(&mut self.reports)
            .into_iter()
            .zip(&self.descs)
            .map(|(mut c, d)| {
                c.path = children_dir.join(d.file_name(&Component::Data));
                c
            })
            .collect();
        for c in &split.children {
            split.bytes_shared += c.bytes_shared;
            split.bytes_copied += c.bytes_copied;
            split.bytes_reencoded += c.bytes_reencoded;
        }
        split.plan_seconds = self.plan_time.as_secs_f64();
        split.plan_source = Some(self.plan_source);
        split.write_seconds = self.write_time.as_secs_f64();
        Ok((
            parent,
            PendReport {
                job_uid: job_uid.to_string(),
                intent: job.join(INTENT_FILE),
                table_dir: table,
                children_dir,
                split,
            },
        ))
    }
}

/// A whole `OnRestart` split of an opened parent: plan, write into the table's staging,
/// check, [`Staged::pend`]. `lock` (from `split::lock` with the table directory as `--out`)
/// is held throughout.
pub fn split_pending(
    parent: &super::Parent,
    cut: &super::Cut,
    policy: &super::Policy,
    job_uid: &str,
    _lock: &super::SplitLock,
) -> Result<PendReport, super::SplitError> {
    check_job_uid(job_uid)?;
    let plan = parent.plan(cut, policy)?;
    let staged = plan.write(parent.dir())?.check()?;
    Ok(staged.pend(job_uid)?)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A directory under a data directory holding cleave's leftovers.
#[derive(Debug)]
struct Found {
    dir: PathBuf,
    /// It has a `.cleave-pending` directory (a real one: a link is refused).
    pending: bool,
    /// `.cleave-staging-*` directories a killed split or on-restart cleanup left, which
    /// `publish::recover` removes.
    staging: Vec<PathBuf>,
}

fn link_refused(path: &Path, what: &str) -> PublishError {
    let to = fs::read_link(path)
        .map(|t| format!(" (to {})", t.display()))
        .unwrap_or_default();
    pending(
        path,
        format!(
            "is {what}{to}, where cleave only ever creates a directory: refused, nothing was changed (remove the link by hand)"
        ),
    )
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Dir => "a directory",
        Kind::File => "a file",
        Kind::Symlink => "a symbolic link",
        Kind::Other => "a device, FIFO or socket",
    }
}

/// `data_dir` itself, its children (a keyspace directory) and grandchildren
/// (`<keyspace>/<table>-<id>`) with a pending directory or leftover staging. A keyspace or
/// table directory may be a symlink (a table moved to another disk: Cassandra's
/// `Directories` follows it), so those are followed, each directory examined once; the
/// pending directory itself must be a real directory, or the scan fails naming it.
fn scan(data_dir: &Path) -> Result<Vec<Found>, PublishError> {
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    let mut level = vec![data_dir.to_path_buf()];
    for depth in 0..3 {
        let mut next = Vec::new();
        for d in &level {
            let m = match fs::metadata(d) {
                Ok(m) => m,
                Err(e) if depth > 0 && e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(d)(e)),
            };
            if !m.is_dir() || !seen.insert((m.dev(), m.ino())) {
                continue;
            }
            let rd = match fs::read_dir(d) {
                Ok(rd) => rd,
                Err(e) if depth > 0 && e.kind() == std::io::ErrorKind::PermissionDenied => continue,
                Err(e) => return Err(io(d)(e)),
            };
            let mut here = Found {
                dir: d.clone(),
                pending: false,
                staging: Vec::new(),
            };
            for e in rd {
                let e = e.map_err(io(d))?;
                let name = e.file_name().to_string_lossy().into_owned();
                // DirEntry::file_type does not follow a link: what the name itself is.
                let own = e.file_type().map_err(io(&e.path()))?;
                if name == PENDING_DIR {
                    if own.is_dir() {
                        here.pending = true;
                    } else if own.is_symlink() {
                        return Err(link_refused(&e.path(), "a symbolic link"));
                    } else {
                        return Err(link_refused(&e.path(), "not a directory"));
                    }
                } else if name.starts_with(publish::STAGING_PREFIX) && own.is_dir() {
                    here.staging.push(e.path());
                } else if depth < 2
                    && !name.starts_with('.')
                    && fs::metadata(e.path()).is_ok_and(|m| m.is_dir())
                {
                    next.push(e.path());
                }
            }
            here.staging.sort();
            if here.pending || !here.staging.is_empty() {
                found.push(here);
            }
        }
        next.sort();
        level = next;
    }
    Ok(found)
}

/// Table directories under `data_dir` that have a pending directory (see [`scan`]).
pub fn pending_tables(data_dir: &Path) -> Result<Vec<PathBuf>, PublishError> {
    Ok(scan(data_dir)?
        .into_iter()
        .filter(|f| f.pending)
        .map(|f| f.dir)
        .collect())
}

/// The job directories of one table's pending directory, opened by descriptor with
/// `O_NOFOLLOW`: a job-named link is refused (its target is not a job's), other names are
/// not cleave's and are left alone.
fn job_dirs(table_dir: &Path) -> Result<Vec<PathBuf>, PublishError> {
    let p = table_dir.join(PENDING_DIR);
    let pd = Dir::open_configured(table_dir)
        .and_then(|t| t.open_dir(PENDING_DIR))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP | libc::ENOTDIR) => link_refused(&p, "not a directory"),
            _ => io(&p)(e),
        })?;
    let mut v = Vec::new();
    for e in fs::read_dir(&p).map_err(io(&p))? {
        let e = e.map_err(io(&p))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if check_job_uid(&name).is_err() {
            continue;
        }
        match pd.kind(&name).map_err(io(&e.path()))? {
            Some(Kind::Dir) => v.push(e.path()),
            Some(Kind::Symlink) => return Err(link_refused(&e.path(), "a symbolic link")),
            _ => {}
        }
    }
    v.sort();
    Ok(v)
}

/// The job's directory if it is there, opened by descriptor through no link.
fn existing_job(table_dir: &Path, job_uid: &str) -> Result<Option<PathBuf>, PublishError> {
    let j = job_dir(table_dir, job_uid);
    match Dir::open_configured(table_dir).and_then(|t| t.walk(&[PENDING_DIR, job_uid], false)) {
        Ok(_) => Ok(Some(j)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => Err(
            link_refused(&j, "not a directory (or is reached through a link)"),
        ),
        Err(e) => Err(io(&j)(e)),
    }
}

/// Whether `name` in a job directory is one of the names cleave gives it, of its kind.
fn own_name(name: &str, kind: Kind) -> bool {
    match name {
        INTENT_FILE | OUTCOME_FILE | APPLYING_FILE => kind == Kind::File,
        APPLY_DIR => kind == Kind::Dir,
        n if n.starts_with("children-") => kind == Kind::Dir,
        // A temporary JSON file of a write killed before its rename.
        n if n.starts_with('.') && n.ends_with(".tmp") => kind == Kind::File,
        _ => false,
    }
}

/// The names in `job` that are not a job's own (with what they are), found by descriptor.
fn foreign_names(job: &Path) -> Result<Vec<String>, PublishError> {
    let d = Dir::open(job).map_err(io(job))?;
    let mut v = Vec::new();
    for e in fs::read_dir(job).map_err(io(job))? {
        let e = e.map_err(io(job))?;
        let name = e.file_name().to_string_lossy().into_owned();
        match d.kind(&name).map_err(io(&e.path()))? {
            Some(k) if !own_name(&name, k) => v.push(format!("{name} ({})", kind_name(k))),
            _ => {}
        }
    }
    v.sort();
    Ok(v)
}

/// Where one job stands on a node's data volume.
#[derive(Debug, Default)]
pub struct JobState {
    /// Tables whose intent for the job waits for apply-pending.
    pub pending: Vec<PathBuf>,
    /// What apply-pending recorded for it, one outcome a table.
    pub outcomes: Vec<Outcome>,
}

/// The intents and outcomes of `job_uid` under `data_dir`.
pub fn job_state(data_dir: &Path, job_uid: &str) -> Result<JobState, PublishError> {
    check_job_uid(job_uid)?;
    let mut st = JobState::default();
    for t in pending_tables(data_dir)? {
        let j = job_dir(&t, job_uid);
        let outcome = j.join(OUTCOME_FILE);
        if outcome.exists() {
            st.outcomes.push(read_outcome(&outcome)?);
        } else if j.join(INTENT_FILE).exists() {
            st.pending.push(t);
        }
    }
    Ok(st)
}

/// Withdraws a job that will not be published (its resource was deleted): removes its
/// staged children, then its intent, then its directory, under the table lock (an
/// apply-pending of the same table waits or is refused). True if there was something to
/// withdraw. An apply in flight (`applying.json`, a crash after the children got their
/// final names) is not withdrawn: the next apply-pending finishes it, parent or children.
pub fn withdraw(table_dir: &Path, job_uid: &str) -> Result<bool, PublishError> {
    check_job_uid(job_uid)?;
    let Some(j) = existing_job(table_dir, job_uid)? else {
        return Ok(false);
    };
    let _lock = publish::lock_for_split(table_dir, table_dir)?;
    withdraw_job(table_dir, &j)
}

/// [`withdraw`] by a cleave that holds the table's lock already (`lock`): a cleanup
/// undoing its own half-pended table.
pub fn withdraw_locked(
    table_dir: &Path,
    job_uid: &str,
    _lock: &super::SplitLock,
) -> Result<bool, PublishError> {
    check_job_uid(job_uid)?;
    let Some(j) = existing_job(table_dir, job_uid)? else {
        return Ok(false);
    };
    withdraw_job(table_dir, &j)
}

fn withdraw_job(table_dir: &Path, j: &Path) -> Result<bool, PublishError> {
    if j.join(APPLYING_FILE).exists() && !j.join(OUTCOME_FILE).exists() {
        return Err(pending(
            j,
            "an apply-pending was interrupted while publishing this job: run `cleave apply-pending` (Cassandra stopped) to finish it before withdrawing",
        ));
    }
    // The children first (durably), then the intent with the directory: a crash in between
    // leaves an intent whose children are gone, which apply-pending drops (CheckFailed).
    clean_job(j)?;
    remove_job_dir(table_dir, j)?;
    Ok(true)
}

/// Removes a job's directory (what is left of it: intent, outcome) and the pending
/// directory with its last job. Only a job's own names are removed, and the directory with
/// `rmdir`: one that holds anything else stays, and the error names what.
fn remove_job_dir(table_dir: &Path, j: &Path) -> Result<(), PublishError> {
    let d = match Dir::open(j) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(j)(e)),
    };
    for e in fs::read_dir(j).map_err(io(j))? {
        let e = e.map_err(io(j))?;
        let name = e.file_name().to_string_lossy().into_owned();
        match d.kind(&name).map_err(io(&e.path()))? {
            Some(Kind::Dir) if own_name(&name, Kind::Dir) => {
                fs::remove_dir_all(e.path()).map_err(io(&e.path()))?
            }
            Some(Kind::File) if own_name(&name, Kind::File) => {
                d.remove_file(&name).map_err(io(&e.path()))?
            }
            _ => {}
        }
    }
    d.sync().map_err(io(j))?;
    if let Err(e) = fs::remove_dir(j) {
        let left = foreign_names(j).unwrap_or_default();
        return Err(pending(
            j,
            format!(
                "not removed ({e}): it holds names that are not a cleave job's: {}",
                left.join(", ")
            ),
        ));
    }
    let p = table_dir.join(PENDING_DIR);
    sync_dir(&p).map_err(io(&p))?;
    if fs::remove_dir(&p).is_ok() {
        sync_dir(table_dir).map_err(io(table_dir))?;
    }
    Ok(())
}

/// Removes a job's outcome (and its pending directory) once the sidecar has recorded it.
pub fn acknowledge_outcome(table_dir: &Path, job_uid: &str) -> Result<(), PublishError> {
    check_job_uid(job_uid)?;
    let Some(j) = existing_job(table_dir, job_uid)? else {
        return Ok(());
    };
    if j.join(INTENT_FILE).exists() {
        return Err(pending(&j, "the intent is not applied yet"));
    }
    remove_job_dir(table_dir, &j)
}

#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// Check everything (the guard, the parents, the children), change nothing, and report
    /// what a run would do.
    pub dry_run: bool,
}

/// What one job came to in one run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum JobAction {
    /// Published or dropped by this run; the outcome is on disk.
    Applied { outcome: Outcome },
    /// `dry_run`: what a run would record.
    WouldApply { outcome: Outcome },
    /// An earlier run's outcome (this run only finished its clean-up).
    AlreadyDone { job_uid: String },
    /// A job directory with no intent: a pend killed before its intent was durable.
    RemovedIncomplete { dir: PathBuf },
    /// Not touched: an intent of a newer format (a rollback to an older image), or a job
    /// directory holding names that are not a job's. It waits, as it is, for a cleave that
    /// can act on it or for an operator.
    LeftAlone {
        dir: PathBuf,
        reason: Reason,
        message: String,
    },
}

/// What `run_on_restart` did.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub data_dir: PathBuf,
    /// False on a node's first boot: Cassandra creates its data directory when it first
    /// starts, after the init container, so nothing can be pending there (not an error).
    pub data_dir_exists: bool,
    pub dry_run: bool,
    pub tables: usize,
    /// Staging directories of a killed split or on-restart cleanup that `recover` removed
    /// (or, `dry_run`, would remove).
    #[serde(default)]
    pub stale_staging: Vec<PathBuf>,
    /// Interrupted transactions `recover` finished before applying.
    pub recovered: Vec<Recovery>,
    pub jobs: Vec<JobAction>,
}

impl ApplyReport {
    pub fn outcomes(&self) -> impl Iterator<Item = &Outcome> {
        self.jobs.iter().filter_map(|j| match j {
            JobAction::Applied { outcome } | JobAction::WouldApply { outcome } => Some(outcome),
            _ => None,
        })
    }
}

/// `cleave apply-pending`: publishes every intent under `data_dir` (see the module
/// comment). Refuses the whole run, changing nothing, with `CassandraRunning` /
/// `CassandraMayBeRunning` (`split::guard`) or `Busy` (another cleave holds a table). A
/// parent that is no longer what its intent recorded drops that intent (`ParentChanged`).
/// Idempotent: a second run finds only outcomes.
pub fn run_on_restart(data_dir: &Path, opts: &ApplyOptions) -> Result<ApplyReport, PublishError> {
    // A first boot: the volume is empty and Cassandra creates `data/` when it first starts,
    // which is after the init container. No directory, no intent: nothing to publish, and
    // nothing to say as an error (the init container's log is read when something fails).
    // Only NotFound; any other failure to look (permissions, I/O) still refuses the run.
    let data_dir_exists = match fs::symlink_metadata(data_dir) {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(io(data_dir)(e)),
    };
    if !data_dir_exists {
        return Ok(ApplyReport {
            data_dir: data_dir.to_path_buf(),
            data_dir_exists,
            dry_run: opts.dry_run,
            tables: 0,
            stale_staging: Vec::new(),
            recovered: Vec::new(),
            jobs: Vec::new(),
        });
    }
    // Everything that can refuse the run (a linked pending or job directory) is looked at
    // before anything changes.
    let found = scan(data_dir)?;
    let mut tables = Vec::with_capacity(found.len());
    for f in found {
        let jobs = if f.pending {
            job_dirs(&f.dir)?
        } else {
            Vec::new()
        };
        tables.push((f, jobs));
    }
    let mut report = ApplyReport {
        data_dir: data_dir.to_path_buf(),
        data_dir_exists,
        dry_run: opts.dry_run,
        tables: tables.iter().filter(|(f, _)| f.pending).count(),
        stale_staging: tables
            .iter()
            .flat_map(|(f, _)| f.staging.iter().cloned())
            .collect(),
        recovered: Vec::new(),
        jobs: Vec::new(),
    };
    if tables.is_empty() {
        return Ok(report);
    }
    // The proof is what lets `replace_all` publish, with one syncfs (docs/split.md
    // "Durability"): the children were made durable one file at a time when pended. A
    // table linked to another disk is looked at there too: a Cassandra's open files
    // resolve to that disk, not under `data_dir`.
    let mut guarded: Vec<PathBuf> = vec![data_dir.to_path_buf()];
    let root = fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    for (f, _) in &tables {
        if let Ok(c) = fs::canonicalize(&f.dir) {
            if !c.starts_with(&root) && !guarded.contains(&c) {
                guarded.push(c);
            }
        }
    }
    let guarded: Vec<&Path> = guarded.iter().map(|p| p.as_path()).collect();
    let stopped = super::guard::cassandra_not_started(&guarded)?;
    point("apply:guarded");
    for (f, jobs) in &tables {
        let t = &f.dir;
        // `recover` takes the table lock itself (and gives it back): first, then ours. It
        // also removes the staging of a split or on-restart cleanup killed mid-write.
        if !opts.dry_run {
            report.recovered.extend(publish::recover(t)?);
        }
        if jobs.is_empty() {
            continue;
        }
        let _lock = publish::lock_for_split(t, t)?;
        for j in jobs {
            report.jobs.push(apply_job(t, j, opts, &stopped)?);
        }
    }
    Ok(report)
}

fn remove_if_exists(p: &Path) -> Result<(), PublishError> {
    // A link is removed itself, never followed.
    let r = if fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
        fs::remove_dir_all(p)
    } else {
        fs::remove_file(p)
    };
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(p)(e)),
    }
}

/// Removes a job's children (every `children-*` directory), apply directory, applying
/// record and torn temporary files, and — last, and only once its outcome is durable — its intent.
fn clean_job(job: &Path) -> Result<(), PublishError> {
    for e in fs::read_dir(job).map_err(io(job))? {
        let e = e.map_err(io(job))?;
        let n = file_name(&e.path());
        // A temporary JSON file of a write killed before its rename is garbage too.
        if n.starts_with("children-") || (n.starts_with('.') && n.ends_with(".tmp")) {
            remove_if_exists(&e.path())?;
        }
    }
    remove_if_exists(&job.join(APPLY_DIR))?;
    remove_if_exists(&job.join(APPLYING_FILE))?;
    sync_dir(job).map_err(io(job))?;
    point("apply:children-removed");
    if job.join(OUTCOME_FILE).exists() {
        remove_if_exists(&job.join(INTENT_FILE))?;
        sync_dir(job).map_err(io(job))?;
        point("apply:intent-removed");
    }
    Ok(())
}

/// `applying.json`: the children's final names in the table directory.
#[derive(Debug, Serialize, Deserialize)]
struct Applying {
    children: Vec<String>,
}

fn apply_job(
    table: &Path,
    job: &Path,
    opts: &ApplyOptions,
    stopped: &super::guard::CassandraStopped,
) -> Result<JobAction, PublishError> {
    let uid = file_name(job);
    let left_alone = |reason: Reason, message: String| JobAction::LeftAlone {
        dir: job.to_path_buf(),
        reason,
        message,
    };
    let foreign = foreign_names(job)?;
    if !foreign.is_empty() {
        return Ok(left_alone(
            Reason::InvalidRequest,
            format!(
                "holds {}, which are not a cleave job's names: the job was left as it is (move them out, or remove the job directory by hand)",
                foreign.join(", ")
            ),
        ));
    }
    if job.join(OUTCOME_FILE).exists() {
        if !opts.dry_run && job.join(INTENT_FILE).exists() {
            clean_job(job)?;
        }
        return Ok(JobAction::AlreadyDone { job_uid: uid });
    }
    if !job.join(INTENT_FILE).exists() {
        if !opts.dry_run {
            remove_job_dir(table, job)?;
        }
        return Ok(JobAction::RemovedIncomplete {
            dir: job.to_path_buf(),
        });
    }
    let outcome = |operation: &str, result: OutcomeResult| Outcome {
        version: FORMAT_VERSION,
        job_uid: uid.clone(),
        table_dir: table.to_path_buf(),
        operation: operation.to_string(),
        finished_unix_ms: now_ms(),
        result,
    };
    if let Some(v) = newer_version(&job.join(INTENT_FILE)) {
        // intent.json's promise (`check_version`): a newer cleave's record is not acted on,
        // and not destroyed either; the cleave that wrote it (after a roll forward) will.
        return Ok(left_alone(
            Reason::InvalidRequest,
            format!(
                "{}: intent format {v} is newer than this cleave's {FORMAT_VERSION}: left as it is for the cleave that wrote it",
                job.join(INTENT_FILE).display()
            ),
        ));
    }
    let intent = match read_intent(&job.join(INTENT_FILE)).and_then(|i| {
        validate(job, &i).map_err(|what| pending(&job.join(INTENT_FILE), what))?;
        Ok(i)
    }) {
        Ok(i) => i,
        Err(e) => {
            let o = outcome(
                "",
                OutcomeResult::Failed {
                    reason: Reason::InvalidRequest,
                    message: format!("{e}; the job's staged children were removed"),
                },
            );
            return finish(job, o, opts);
        }
    };
    let parents: Vec<&str> = intent
        .parents
        .iter()
        .map(|p| p.parent.data_file.as_str())
        .collect();
    // A run killed after COMMIT: recover finished it forward, the children are live.
    if let Ok(a) = read_json::<Applying>(&job.join(APPLYING_FILE)) {
        let live = |n: &String| {
            Descriptor::from_path(&table.join(n))
                .is_ok_and(|(d, _)| table.join(d.file_name(&Component::Toc)).exists())
        };
        let bare = a.children.iter().all(|n| bare_data_name(n).is_ok());
        if bare && a.children.iter().all(live) && !parents.iter().any(|p| table.join(p).exists()) {
            let children: Vec<PathBuf> = a.children.iter().map(|c| table.join(c)).collect();
            let o = outcome(
                &intent.operation,
                OutcomeResult::Complete {
                    parents: parents.iter().map(|p| p.to_string()).collect(),
                    by_parent: by_parent(&intent, &children),
                    children,
                },
            );
            return finish(job, o, opts);
        }
    }
    let changed: Vec<String> = intent
        .parents
        .iter()
        .filter_map(|p| parent_difference(table, &p.parent))
        .collect();
    if !changed.is_empty() {
        let o = outcome(
            &intent.operation,
            OutcomeResult::Failed {
                reason: Reason::ParentChanged,
                message: format!(
                    "{}; nothing was published and the staged children were removed",
                    changed.join("; ")
                ),
            },
        );
        return finish(job, o, opts);
    }
    // The staged children as the intent recorded them.
    let mut damaged = Vec::new();
    for p in &intent.parents {
        for c in &p.children {
            for f in &c.files {
                let path = job.join(&p.children_dir).join(&f.name);
                match fs::metadata(&path) {
                    Ok(m) if m.len() == f.size => {}
                    Ok(m) => damaged.push(format!(
                        "{}: {} bytes, the intent recorded {}",
                        path.display(),
                        m.len(),
                        f.size
                    )),
                    Err(e) => damaged.push(format!("{}: {e}", path.display())),
                }
            }
        }
    }
    if !damaged.is_empty() {
        let o = outcome(
            &intent.operation,
            OutcomeResult::Failed {
                reason: Reason::CheckFailed,
                message: format!(
                    "staged children are not what the intent recorded: {}; nothing was published",
                    damaged.join("; ")
                ),
            },
        );
        return finish(job, o, opts);
    }
    if let Err(what) = children_keys(job, &intent) {
        let o = outcome(
            &intent.operation,
            OutcomeResult::Failed {
                reason: Reason::CheckFailed,
                message: format!(
                    "staged children are not what was checked at staging: {what}; nothing was published"
                ),
            },
        );
        return finish(job, o, opts);
    }
    let n: usize = intent.parents.iter().map(|p| p.children.len()).sum();
    if opts.dry_run {
        // The children it would publish, where they are staged now: a run gives them fresh
        // generations in the table directory as it publishes them (docs/split.md "Publish
        // on restart").
        let staged: Vec<PathBuf> = intent
            .parents
            .iter()
            .flat_map(|p| {
                let dir = job.join(&p.children_dir);
                p.children.iter().map(move |c| dir.join(&c.data_file))
            })
            .collect();
        let o = outcome(
            &intent.operation,
            OutcomeResult::Complete {
                parents: parents.iter().map(|p| p.to_string()).collect(),
                by_parent: by_parent(&intent, &staged),
                children: staged,
            },
        );
        return Ok(JobAction::WouldApply { outcome: o });
    }
    // Fresh ids, hard links under the new names into apply/ (the originals stay).
    let apply = job.join(APPLY_DIR);
    remove_if_exists(&apply)?;
    fs::create_dir(&apply).map_err(io(&apply))?;
    let mut gens = publish::next_generations(&[table], n)
        .map_err(PublishError::Format)?
        .into_iter();
    let mut children = Vec::with_capacity(n);
    let mut finals = Vec::with_capacity(n);
    for p in &intent.parents {
        let from_dir = job.join(&p.children_dir);
        for c in &p.children {
            let gen = gens
                .next()
                .ok_or_else(|| pending(table, "fewer generation ids than children"))?;
            let (old, _) = Descriptor::from_path(&from_dir.join(&c.data_file))?;
            let new = Descriptor {
                dir: apply.clone(),
                id: SSTableId::Sequence(gen),
                ..old.clone()
            };
            let old_prefix = old.file_name(&Component::Other(String::new()));
            let new_prefix = new.file_name(&Component::Other(String::new()));
            for f in &c.files {
                let suffix = f.name.strip_prefix(&old_prefix).ok_or_else(|| {
                    pending(
                        &from_dir.join(&f.name),
                        format!("is not a file of {old_prefix}*"),
                    )
                })?;
                let to = apply.join(format!("{new_prefix}{suffix}"));
                fs::hard_link(from_dir.join(&f.name), &to).map_err(io(&to))?;
                point("apply:linked-file");
            }
            finals.push(new.file_name(&Component::Data));
            children.push((apply.clone(), new));
        }
    }
    sync_dir(&apply).map_err(io(&apply))?;
    sync_dir(job).map_err(io(job))?;
    point("apply:linked");
    write_json(
        &job.join(APPLYING_FILE),
        &Applying {
            children: finals.clone(),
        },
        "applying",
    )?;
    let parent_descs: Vec<Descriptor> = parents
        .iter()
        .map(|p| Descriptor::from_path(&table.join(p)).map(|(d, _)| d))
        .collect::<Result<_, _>>()?;
    let published = publish::replace_all(
        table,
        &children,
        &parent_descs,
        TxnOperation::from_name(&intent.operation),
        stopped,
    )?;
    point("apply:published");
    let o = outcome(
        &intent.operation,
        OutcomeResult::Complete {
            parents: parents.iter().map(|p| p.to_string()).collect(),
            by_parent: by_parent(&intent, &published.data_paths),
            children: published.data_paths,
        },
    );
    finish(job, o, opts)
}

/// The `version` of a JSON record, if it is newer than this cleave's (read before the
/// record is parsed as this cleave's format, whose shape a newer one need not have).
fn newer_version(path: &Path) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
    let version = v.get("version")?.as_u64()?;
    (version > u64::from(FORMAT_VERSION)).then_some(version)
}

/// `name` if it is the bare Data.db file name of an sstable (`nb-5-big-Data.db`): no
/// directory, no `..`, nothing that parses to another file.
fn bare_data_name(name: &str) -> Result<(), String> {
    let ok = !name.contains('/')
        && !name.contains('\0')
        && Descriptor::from_path(Path::new(name))
            .is_ok_and(|(d, c)| c == Component::Data && d.file_name(&Component::Data) == name);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not the bare Data.db file name of an sstable (e.g. nb-5-big-Data.db)"
        ))
    }
}

/// An intent is checked as `publish::recover` checks a transaction log before it acts on
/// any of it: every name a bare name inside this table's job directory, nothing twice,
/// each child one whole sstable that agrees with its TOC.txt, at least one child for each
/// parent of a split or anticompaction. Only cleave writes intents, so any failure here is
/// a hand edit or a damaged volume. A child's files that are absent are not this check's
/// business: the size check after it reports them (`CheckFailed`, a withdraw killed
/// half-way leaves exactly that).
fn validate(job: &Path, i: &Intent) -> Result<(), String> {
    let uid = file_name(job);
    if i.job_uid != uid {
        return Err(format!(
            "job_uid {:?} is not its directory's name {uid:?}",
            i.job_uid
        ));
    }
    if !matches!(i.operation.as_str(), "split" | "anticompaction" | "cleanup") {
        return Err(format!(
            "operation {:?}: expected split, anticompaction or cleanup",
            i.operation
        ));
    }
    if i.parents.is_empty() {
        return Err("no parents".into());
    }
    let jd = Dir::open(job).map_err(|e| format!("{}: {e}", job.display()))?;
    let mut parents = BTreeSet::new();
    let mut dirs = BTreeSet::new();
    for p in &i.parents {
        let pf = &p.parent.data_file;
        bare_data_name(pf).map_err(|e| format!("parent {e}"))?;
        if !parents.insert(pf.as_str()) {
            return Err(format!("parent {pf} is listed twice"));
        }
        if p.children.is_empty() {
            // A REMOVE without an ADD drops the parent's rows: only a cleanup's wholly
            // unowned sstable is removed so (`dropped`).
            if i.operation != "cleanup" {
                return Err(format!(
                    "parent {pf} has no children, which only a cleanup may record (operation {:?})",
                    i.operation
                ));
            }
            if !p.children_dir.is_empty() {
                return Err(format!(
                    "parent {pf} has no children but children_dir {:?}",
                    p.children_dir
                ));
            }
            continue;
        }
        let cd = &p.children_dir;
        let bare = cd.starts_with("children-")
            && !cd.contains('/')
            && !cd.contains('\0')
            && cd.len() > "children-".len();
        if !bare {
            return Err(format!(
                "parent {pf}: children_dir {cd:?} is not a bare children-* directory name of this job"
            ));
        }
        if !dirs.insert(cd.as_str()) {
            return Err(format!("children_dir {cd} is listed for two parents"));
        }
        let children = match jd.kind(cd).map_err(|e| format!("{cd}: {e}"))? {
            None => continue,
            Some(Kind::Dir) => jd.open_dir(cd).map_err(|e| format!("{cd}: {e}"))?,
            Some(k) => return Err(format!("{cd} is {}, not a directory", kind_name(k))),
        };
        let mut datas = BTreeSet::new();
        for c in &p.children {
            let cf = &c.data_file;
            bare_data_name(cf).map_err(|e| format!("{cd}: child {e}"))?;
            if !datas.insert(cf.as_str()) {
                return Err(format!("{cd}: child {cf} is listed twice"));
            }
            let prefix = cf.strip_suffix("Data.db").unwrap_or(cf);
            let mut names = BTreeSet::new();
            for f in &c.files {
                let n = f.name.as_str();
                let suffix = n.strip_prefix(prefix).unwrap_or("");
                if suffix.is_empty() || n.contains('/') || n.contains('\0') {
                    return Err(format!("{cd}: {n:?} is not a file of {prefix}*"));
                }
                if !names.insert(n) {
                    return Err(format!("{cd}: {n} is listed twice"));
                }
                match children.kind(n).map_err(|e| format!("{cd}/{n}: {e}"))? {
                    None | Some(Kind::File) => {}
                    Some(k) => return Err(format!("{cd}/{n} is {}, not a file", kind_name(k))),
                }
            }
            let toc_name = format!("{prefix}TOC.txt");
            for must in [cf.as_str(), toc_name.as_str()] {
                if !names.contains(must) {
                    return Err(format!(
                        "{cd}: child {cf}'s file list has no {must}: it would be published incomplete"
                    ));
                }
            }
            // The list is the sstable its TOC.txt says (TOC.txt lists itself, as
            // Cassandra's `SSTable.componentsFor` expects; tolerated if not).
            let toc_path = job.join(cd).join(&toc_name);
            let bytes = match children.open_read(&toc_name) {
                Ok(mut f) => {
                    let mut b = Vec::new();
                    std::io::Read::read_to_end(&mut f, &mut b)
                        .map_err(|e| format!("{}: {e}", toc_path.display()))?;
                    b
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("{}: {e}", toc_path.display())),
            };
            let toc = Toc::parse(&toc_path, &bytes).map_err(|e| e.to_string())?;
            let mut listed: BTreeSet<String> = toc
                .components
                .iter()
                .map(|c| format!("{prefix}{}", c.file_name()))
                .collect();
            listed.insert(toc_name.clone());
            let have: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
            if listed != have {
                return Err(format!(
                    "{cd}: child {cf}'s file list {:?} is not the sstable its TOC.txt lists {:?}",
                    have, listed
                ));
            }
        }
    }
    Ok(())
}

/// Reads the staged children's keys again (their Index.db, as `Staged::check` did) and
/// compares them with what was checked at staging: each child's partition count, and each
/// parent's children's fingerprint where the intent recorded it.
fn children_keys(job: &Path, i: &Intent) -> Result<(), String> {
    for p in i.parents.iter().filter(|p| !p.children.is_empty()) {
        let mut fp = Fingerprint::default();
        for c in &p.children {
            let path = job.join(&p.children_dir).join(&c.data_file);
            let t = SSTable::open(&path).map_err(|e| e.to_string())?;
            let rep = t
                .check(CheckLevel::Index, &mut |_| {})
                .map_err(|e| e.to_string())?;
            if rep.fingerprint.count != c.partitions {
                return Err(format!(
                    "{}: {} partitions, the intent recorded {}",
                    path.display(),
                    rep.fingerprint.count,
                    c.partitions
                ));
            }
            fp.merge(&rep.fingerprint);
        }
        if let Some(want) = &p.fingerprint {
            let got = RecordedFingerprint::from(fp);
            if &got != want {
                return Err(format!(
                    "{}: the children's key fingerprint is {got:?}, checked at staging {want:?}",
                    job.join(&p.children_dir).display()
                ));
            }
        }
    }
    Ok(())
}

/// Records the outcome durably, then removes what the job staged and its intent. A
/// failure removes the children first, so an outcome that says they are gone is true.
fn finish(job: &Path, o: Outcome, opts: &ApplyOptions) -> Result<JobAction, PublishError> {
    if opts.dry_run {
        return Ok(JobAction::WouldApply { outcome: o });
    }
    if o.reason().is_some() {
        clean_job(job)?;
    }
    write_json(&job.join(OUTCOME_FILE), &o, "outcome")?;
    clean_job(job)?;
    Ok(JobAction::Applied { outcome: o })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_uids_are_names_not_paths() {
        for ok in ["a", "0b7c7e4a-6a45-4d3c-9f3e-0d2c1f7a9b10", "job_1"] {
            assert!(check_job_uid(ok).is_ok(), "{ok}");
        }
        for bad in ["", "..", "a/b", ".hidden", "x y", &"a".repeat(65)] {
            let e = check_job_uid(bad).unwrap_err();
            assert_eq!(e.reason(), Reason::InvalidRequest, "{bad}");
        }
    }

    #[test]
    fn an_outcome_round_trips_with_its_reason() {
        let o = Outcome {
            version: FORMAT_VERSION,
            job_uid: "u".into(),
            table_dir: "/t".into(),
            operation: "split".into(),
            finished_unix_ms: 1,
            result: OutcomeResult::Failed {
                reason: Reason::ParentChanged,
                message: "m".into(),
            },
        };
        let j = serde_json::to_string(&o).unwrap();
        assert!(
            j.contains(r#""state":"Failed""#) && j.contains(r#""reason":"ParentChanged""#),
            "{j}"
        );
        let back: Outcome = serde_json::from_str(&j).unwrap();
        assert_eq!(back, o);
        assert_eq!(back.reason(), Some(Reason::ParentChanged));
    }
}

//! What a split reports: per child and in total, printed by the CLI (`--json`), recorded
//! in a job's status and counted in metrics.

use std::path::PathBuf;

use super::fallback::Fallback;
use super::plan::{ChildPlan, Layout, PlanSource};
use super::publish::Publish;
use super::spec::Label;
use crate::sstable::fingerprint::Fingerprint;

#[derive(Debug, Clone, serde::Serialize)]
pub struct ChildReport {
    pub path: PathBuf,
    pub partitions: u64,
    pub first_token: String,
    pub last_token: String,
    #[serde(serialize_with = "crate::sstable::hex::serialize")]
    pub first_key: Vec<u8>,
    #[serde(serialize_with = "crate::sstable::hex::serialize")]
    pub last_key: Vec<u8>,
    pub data_length: u64,
    pub data_file_bytes: u64,
    /// Bytes of zeros before the first partition (0 when fillers occupy them).
    pub dead_prefix: u64,
    /// Empty partitions that occupy the dead prefix (`split::head`), and their bytes: the
    /// child's first partition is then at position 0.
    pub filler_partitions: u64,
    pub filler_bytes: u64,
    pub layout: Layout,
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
    /// `{"reason", "message"}` when the child did not get the requested layout.
    pub fallback: Option<Fallback>,
    pub label: Option<Label>,
    pub repaired_at: Option<i64>,
    pub pending_repair: Option<String>,
    pub is_transient: Option<bool>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub parent: Fingerprint,
    pub children: Fingerprint,
    pub ok: bool,
    /// What the fingerprints count partitions by.
    pub by: FingerprintBy,
}

/// What a split's fingerprints count each partition by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FingerprintBy {
    /// Its key's Murmur3 (what `cleave verify` prints).
    Keys,
    /// Its parent Data.db position and trie hash byte: a trie-only BTI split reads no key
    /// (`split::trie_only`).
    TriePositions,
}

impl FingerprintBy {
    pub fn of(source: super::plan::PlanSource) -> FingerprintBy {
        match source {
            super::plan::PlanSource::PartitionsTrie => FingerprintBy::TriePositions,
            _ => FingerprintBy::Keys,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SplitReport {
    pub parent: PathBuf,
    pub dry_run: bool,
    #[serde(serialize_with = "Publish::serialize_name")]
    pub publish: Publish,
    pub reflink: String,
    pub children: Vec<ChildReport>,
    pub plan: Vec<ChildPlan>,
    /// The parent's key fingerprint against its children's, after the write. A dry run
    /// writes and checks nothing: `None` (`null`), never a check that reads as a failure.
    pub check: Option<Check>,
    /// The parent's partitions (exact, from the plan; a dry run's too).
    pub parent_partitions: u64,
    /// Of the children's Data.db; a dry run's are the plan's predictions (the sum of
    /// `plan[].predicted`), a run's what was done.
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
    /// `/proc/self/io` read_bytes / write_bytes during the split (device-level).
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Seconds of the planning pass over Index.db and of the write (index pass, data, fsync).
    pub plan_seconds: f64,
    pub write_seconds: f64,
    /// What the plan was made from (`summary_samples`, `index_pass` or `partitions_trie`); with
    /// `summary_samples` the plan has the partition count only, no key fingerprint.
    pub plan_source: Option<PlanSource>,
    /// What publication could not clean up after the children went live (files of the
    /// parent, the log, staging), each with the obstacle; empty on a clean run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_behind: Vec<String>,
    /// How the split made its files durable and the calls it took (absent in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityReport>,
}

/// `durability` of a split report: `syncfs` for a Replace with Cassandra proven stopped
/// (one syncfs before COMMIT), `per_file` otherwise (docs/split.md "Durability").
#[derive(Debug, Clone, serde::Serialize)]
pub struct DurabilityReport {
    pub mode: &'static str,
    /// fsync/fdatasync and syncfs calls this split made, from the preflight to publication.
    pub calls: crate::io::durable::SyncCounts,
}

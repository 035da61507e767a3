//! The dead-prefix survey of a node's data directory: which sstables start their first
//! partition past Data.db position 0, so that an upgrade to Cassandra 5.0.5+ can be
//! planned (docs/runbook.md, "Before upgrading to 5.0.5").
//!
//! A dead prefix is what cleave's children for `--target-cassandra` ≤ 5.0.4 carry (and
//! every child of a cleave before the filler layouts): 3.0 to 5.0.4 find the first
//! partition through Index.db, but from 5.0.5 compaction, `upgradesstables` and
//! `garbagecollect` read Data.db from position 0 (`SSTableSimpleScanner`,
//! CASSANDRA-20092), every 5.0.x scrub does, and `verify -e` refuses such a file. Only the
//! first Index.db entry is read per sstable: a survey of a node's whole data directory
//! costs one small read per sstable, never a Data.db scan.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::reason::Reason;
use crate::sstable::descriptor::{Component, Descriptor};
use crate::sstable::SSTable;

/// Directories Cassandra keeps beside the live sstables that are not read by compaction:
/// `nodetool snapshot`'s hard links and incremental backups (`Directories.SNAPSHOT_SUBDIR`,
/// `BACKUPS_SUBDIR`). They are counted apart: restoring them brings the dead prefix back.
const ASIDE: [&str; 2] = ["snapshots", "backups"];

/// What the survey found under one directory.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Survey {
    pub root: PathBuf,
    /// Live sstables read (their first Index.db entry).
    pub sstables: u64,
    /// Of those, the ones with a dead prefix.
    pub dead_prefix: u64,
    /// Data.db bytes of the sstables with a dead prefix (what `cleave rewrite` rewrites).
    pub dead_prefix_bytes: u64,
    /// Sstables under `snapshots/` or `backups/` with a dead prefix.
    pub dead_prefix_aside: u64,
    /// Per table, every table with at least one live sstable.
    pub tables: Vec<TableSurvey>,
    /// Every sstable with a dead prefix, live ones first.
    pub files: Vec<DeadPrefixFile>,
    /// Sstables the survey could not read: a damaged or unsupported one (BIG and BTI `da`
    /// are both read: a BTI child cut for a 5.0.0–5.0.4 target may have a dead prefix).
    pub unreadable: Vec<Unreadable>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TableSurvey {
    pub keyspace: String,
    pub table: String,
    pub sstables: u64,
    pub dead_prefix: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeadPrefixFile {
    pub path: PathBuf,
    pub keyspace: String,
    pub table: String,
    /// Data.db position of the first partition (the dead prefix's length).
    pub first_position: u64,
    pub data_file_bytes: u64,
    /// Under `snapshots/` or `backups/`.
    pub aside: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Unreadable {
    pub path: PathBuf,
    pub reason: Reason,
    pub message: String,
}

/// Why a survey could not start: the root itself does not read.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct SurveyError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl SurveyError {
    pub fn reason(&self) -> Reason {
        Reason::of_io(&self.source)
    }
}

/// Surveys `root`: a data directory (`<keyspace>/<table>-<id>/`), a keyspace directory, a
/// table directory, or one of their `snapshots/…` directories. Directories starting with
/// `.` (cleave's staging, a legacy secondary index's own table) are not entered: what is
/// staged is not yet Cassandra's, and an index is rebuilt by Cassandra.
pub fn survey(root: &Path) -> Result<Survey, SurveyError> {
    let mut s = Survey {
        root: root.to_path_buf(),
        ..Survey::default()
    };
    std::fs::read_dir(root).map_err(|source| SurveyError {
        path: root.to_path_buf(),
        source,
    })?;
    let mut data_files = Vec::new();
    collect(root, 0, false, &mut data_files);
    data_files.sort();
    for (path, aside) in data_files {
        let (keyspace, table) = names(&path);
        match first_position(&path) {
            Ok((first, bytes)) => {
                let mut table_at = None;
                if !aside {
                    s.sstables += 1;
                    let i = match s
                        .tables
                        .iter()
                        .position(|t| t.keyspace == keyspace && t.table == table)
                    {
                        Some(i) => i,
                        None => {
                            s.tables.push(TableSurvey {
                                keyspace: keyspace.clone(),
                                table: table.clone(),
                                ..TableSurvey::default()
                            });
                            s.tables.len() - 1
                        }
                    };
                    s.tables[i].sstables += 1;
                    table_at = Some(i);
                }
                if first > 0 {
                    if aside {
                        s.dead_prefix_aside += 1;
                    } else {
                        s.dead_prefix += 1;
                        s.dead_prefix_bytes += bytes;
                        if let Some(i) = table_at {
                            s.tables[i].dead_prefix += 1;
                        }
                    }
                    s.files.push(DeadPrefixFile {
                        path,
                        keyspace,
                        table,
                        first_position: first,
                        data_file_bytes: bytes,
                        aside,
                    });
                }
            }
            Err(u) => s.unreadable.push(Unreadable { path, ..u }),
        }
    }
    s.files.sort_by_key(|f| (f.aside, f.path.clone()));
    Ok(s)
}

/// Every `*-Data.db` below `dir`, with whether it lies under `snapshots/` or `backups/`.
/// Depth-bounded: a data directory is `<keyspace>/<table>/snapshots/<tag>/` at most.
fn collect(dir: &Path, depth: u8, aside: bool, out: &mut Vec<(PathBuf, bool)>) {
    if depth > 5 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            if !name.starts_with('.') {
                let aside = aside || ASIDE.contains(&name);
                collect(&e.path(), depth + 1, aside, out);
            }
        } else if ft.is_file()
            && matches!(Descriptor::from_path(&e.path()), Ok((_, Component::Data)))
        {
            out.push((e.path(), aside));
        }
    }
}

/// The keyspace and table a Data.db belongs to, from Cassandra's directory layout
/// (`<keyspace>/<table>-<32 hex id>/[snapshots/<tag>/|backups/]`): the table directory is
/// the one above `snapshots`/`backups`, else the file's own.
fn names(data: &Path) -> (String, String) {
    fn name(d: Option<&Path>) -> Option<&str> {
        d.and_then(Path::file_name).and_then(|n| n.to_str())
    }
    let parent = data.parent();
    let grand = parent.and_then(Path::parent);
    let table_dir = if name(parent) == Some("backups") {
        grand
    } else if name(grand) == Some("snapshots") {
        grand.and_then(Path::parent)
    } else {
        parent
    };
    table_dir
        .and_then(crate::split::import_dir::keyspace_table_of_dir)
        .unwrap_or_default()
}

/// The first partition's Data.db position and the Data.db size. An sstable without
/// partitions has no dead prefix (position 0).
fn first_position(data: &Path) -> Result<(u64, u64), Unreadable> {
    let fail = |reason, message: String| Unreadable {
        path: data.to_path_buf(),
        reason,
        message,
    };
    let format = |e: crate::sstable::FormatError| {
        fail(crate::split::error::format_reason(&e), e.to_string())
    };
    let t = SSTable::open(data).map_err(format)?;
    // Only a position is wanted: a BTI sstable's trie gives it without reading the key.
    let keys = crate::sstable::bti::scan::KeyMode::AtBounds(Vec::new());
    let src = crate::sstable::scan::PartitionSource::with_keys(&t, keys).map_err(format)?;
    let mut r = src.reader(&t).map_err(format)?;
    let first = r.next_entry().map_err(format)?.map_or(0, |e| e.position);
    Ok((first, t.data_file_size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survey_names_follow_cassandras_layout() {
        let id = "0123456789abcdef0123456789abcdef";
        let p = PathBuf::from(format!("/d/ks/t-{id}/nb-1-big-Data.db"));
        assert_eq!(names(&p), ("ks".into(), "t".into()));
        let p = PathBuf::from(format!("/d/ks/t-{id}/snapshots/tag-1/nb-1-big-Data.db"));
        assert_eq!(names(&p), ("ks".into(), "t".into()));
        let p = PathBuf::from(format!("/d/ks/t-{id}/backups/nb-1-big-Data.db"));
        assert_eq!(names(&p), ("ks".into(), "t".into()));
        // A data directory below a directory named like Cassandra's is not a snapshot.
        let p = PathBuf::from(format!("/mnt/backups/data/ks/t-{id}/nb-1-big-Data.db"));
        assert_eq!(names(&p), ("ks".into(), "t".into()));
        let p = PathBuf::from(format!("/snapshots/x/ks/t-{id}/nb-1-big-Data.db"));
        assert_eq!(names(&p), ("ks".into(), "t".into()));
        // A directory without an id (a test's or a stage's) keeps its name.
        let p = PathBuf::from("/d/ks/t/nb-1-big-Data.db");
        assert_eq!(names(&p), ("ks".into(), "t".into()));
    }

    #[test]
    fn survey_of_a_missing_root_fails_with_its_path() {
        let e = survey(Path::new("/nonexistent/cleave-survey")).unwrap_err();
        assert_eq!(e.reason(), Reason::IoError);
        assert!(e.to_string().contains("/nonexistent/cleave-survey"));
    }
}

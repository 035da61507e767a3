//! A node's Cassandra release read offline from its own `system.local` sstables: partition
//! 'local', regular column `release_version` (text), which `SystemKeyspace.persistLocalMetadata`
//! writes at every start. Like `table.rs` this lists and reads files; the decoding is `row`.

use std::fs;
use std::path::{Path, PathBuf};

use super::bytes::Reader;
use super::descriptor::Component;
use super::error::{FormatError, Result};
use super::row::newest_live_cell;
use super::table::SSTable;

/// The `release_version` cell with the newest timestamp over the sstables read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRelease {
    pub version: String,
    /// Write timestamp, microseconds.
    pub timestamp: i64,
    /// The Data.db it came from.
    pub sstable: PathBuf,
}

/// What `node_release` found, and the sstables it could not read (corrupt, unsupported), with
/// why.
#[derive(Debug, Default)]
pub struct ReleaseScan {
    pub release: Option<NodeRelease>,
    pub sstables_read: usize,
    pub skipped: Vec<(PathBuf, String)>,
}

/// Reads `<data_dir>/system/local-*/*-Data.db` (not snapshots or backups). An sstable that
/// cannot be read — an unsupported format version, or one that fails to parse — is listed in `skipped`, not fatal; only an unreadable `system` directory is.
pub fn node_release(data_dir: &Path) -> Result<ReleaseScan> {
    let system = data_dir.join("system");
    let mut scan = ReleaseScan::default();
    let mut data_files = Vec::new();
    for e in fs::read_dir(&system).map_err(|e| FormatError::io(&system, e))? {
        let e = e.map_err(|e| FormatError::io(&system, e))?;
        let is_local = e
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("local-"));
        if !is_local || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = e.path();
        for f in fs::read_dir(&dir).map_err(|e| FormatError::io(&dir, e))? {
            let f = f.map_err(|e| FormatError::io(&dir, e))?;
            if f.file_name()
                .to_str()
                .is_some_and(|n| n.ends_with("-Data.db"))
            {
                data_files.push(f.path());
            }
        }
    }
    data_files.sort();
    let now_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    for data in data_files {
        match read_one(&data, now_secs) {
            Ok(found) => {
                scan.sstables_read += 1;
                if let Some(f) = found {
                    if scan
                        .release
                        .as_ref()
                        .is_none_or(|b| f.timestamp > b.timestamp)
                    {
                        scan.release = Some(f);
                    }
                }
            }
            Err(e) => scan.skipped.push((data, e.to_string())),
        }
    }
    Ok(scan)
}

fn read_one(data: &Path, now_secs: i64) -> Result<Option<NodeRelease>> {
    // BIG or BTI `da` alike: the partition source yields each key (BTI: read from Data.db).
    let t = SSTable::open(data)?;
    let stats = t.descriptor.path(&Component::Statistics);
    let header = t.statistics.header.as_ref().ok_or_else(|| {
        FormatError::corrupt(
            &stats,
            None,
            "no serialization header: column names unknown",
        )
    })?;
    let src = t.partition_source()?;
    let mut index = src.reader(&t)?;
    let mut at = None;
    let mut end = t.data_length();
    while let Some(e) = index.next_entry()? {
        if at.is_some() {
            end = e.position;
            break;
        }
        if e.key == b"local" {
            at = Some(e.position);
        }
    }
    let Some(at) = at else { return Ok(None) };
    let len = usize::try_from(end - at)
        .map_err(|_| FormatError::corrupt(data, Some(at), "partition 'local' too large"))?;
    let bytes = t.data_reader()?.read_at(at, len)?;
    let mut r = Reader::with_base(data, &bytes, at);
    let cell = newest_live_cell(
        &mut r,
        t.descriptor.version,
        header,
        b"release_version",
        now_secs,
    )?;
    r.expect_end("partition 'local'")?;
    cell.map(|c| {
        let version = String::from_utf8(c.value).map_err(|_| {
            FormatError::corrupt(data, Some(c.offset), "release_version is not UTF-8")
        })?;
        Ok(NodeRelease {
            version,
            timestamp: c.timestamp,
            sstable: data.to_path_buf(),
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sstable::descriptor::Descriptor;
    use crate::sstable::statistics::Statistics;

    fn fixture(version: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/system_local")
            .join(version)
    }

    #[test]
    fn row_release_of_real_4_1_and_5_0_nodes() {
        for (dir, want) in [("4.1.10", "4.1.10"), ("5.0.9", "5.0.9")] {
            let scan = node_release(&fixture(dir)).unwrap();
            assert!(scan.skipped.is_empty(), "{:?}", scan.skipped);
            assert_eq!(scan.sstables_read, 1);
            let r = scan.release.unwrap();
            assert_eq!(r.version, want);
            assert!(r.sstable.ends_with(if dir == "4.1.10" {
                "nb-8-big-Data.db"
            } else {
                "oa-8-big-Data.db"
            }));
        }
    }

    /// Copies a fixture, renames columns in its Statistics.db header, and reads it again.
    fn with_renamed(version: &str, renames: &[(&str, &str)]) -> ReleaseScan {
        let tmp = tempfile::tempdir().unwrap();
        let src = fixture(version).join("system");
        for e in fs::read_dir(&src).unwrap() {
            let e = e.unwrap();
            let to = tmp.path().join("system").join(e.file_name());
            fs::create_dir_all(&to).unwrap();
            for f in fs::read_dir(e.path()).unwrap() {
                let f = f.unwrap();
                let name = f.file_name();
                let bytes = fs::read(f.path()).unwrap();
                let bytes = if name.to_str().unwrap().ends_with("-Statistics.db") {
                    let (d, _) = Descriptor::from_path(&f.path()).unwrap();
                    let mut s = Statistics::parse(&f.path(), &bytes, d.version).unwrap();
                    let h = s.header.as_mut().unwrap();
                    for c in &mut h.regular_columns {
                        if let Some((_, to)) =
                            renames.iter().find(|(from, _)| c.name == from.as_bytes())
                        {
                            c.name = to.as_bytes().to_vec();
                        }
                    }
                    s.serialize(d.version)
                } else {
                    bytes
                };
                fs::write(to.join(name), bytes).unwrap();
            }
        }
        let scan = node_release(tmp.path()).unwrap();
        drop(tmp);
        scan
    }

    #[test]
    fn row_release_negative_controls() {
        for v in ["4.1.10", "5.0.9"] {
            // The column gone from the header: nothing, not the version.
            let scan = with_renamed(v, &[("release_version", "release_versioX")]);
            assert!(scan.skipped.is_empty(), "{:?}", scan.skipped);
            assert_eq!(scan.release, None);
            // Two text columns' names swapped: the cell is found by header position, so the
            // other column's value comes back.
            let scan = with_renamed(
                v,
                &[
                    ("release_version", "cql_version"),
                    ("cql_version", "release_version"),
                ],
            );
            let got = scan.release.as_ref().map(|r| r.version.clone());
            assert_ne!(got.as_deref(), Some(v), "{:?}", scan.skipped);
            assert!(got.is_some_and(|g| g.starts_with("3.4.")));
        }
    }

    #[test]
    fn row_release_of_a_bti_node() {
        // A 5.0.9 node started with `sstable: selected_format: bti`: its system.local is a
        // da sstable, read through Partitions.db like any BIG one through Index.db.
        let scan = node_release(&fixture("5.0.9-bti")).unwrap();
        assert!(scan.skipped.is_empty(), "{:?}", scan.skipped);
        assert_eq!(scan.sstables_read, 1);
        let r = scan.release.unwrap();
        assert_eq!(r.version, "5.0.9");
        assert!(
            r.sstable.ends_with("da-8-bti-Data.db"),
            "{}",
            r.sstable.display()
        );
    }

    #[test]
    fn row_release_without_system_dir_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(node_release(tmp.path()).unwrap_err().kind(), "io");
    }
}

//! Where children wait for `nodetool import`: `<base>/<keyspace>/<table>`.
//!
//! Cassandra 5.0's `SSTableImporter` lists a source directory through
//! `Directories.SSTableLister`, whose filter (`SSTable.tryComponentFromFilename`) parses
//! the keyspace and the table of each file from its two parent directories' names and
//! silently skips the file when they do not parse: a `-` in either name that is not
//! `<table>-<32 hex table id>`. `nodetool import` then exits 0 having imported nothing.
//! Measured on 5.0.9: `<table dir>/cleave-staged/<job>/` and `/x/a-b/job1/` are skipped,
//! `/x/ab/cd/` and `/x/a-b/ks/t/` imported; 4.0.19 and 4.1.10 import all of them. Keyspace
//! and table names are `[A-Za-z0-9_]`, so `<keyspace>/<table>` as the last two levels
//! always parses, whatever the job or group name above it (Kubernetes names have dashes).

use std::path::{Path, PathBuf};

/// The staging directory of the operator and the receiver, below the table directory (same
/// filesystem; not dot-prefixed, which Cassandra would take for a secondary index).
pub const STAGED_DIR: &str = "cleave-staged";

/// `<table dir>/cleave-staged/<group...>/<keyspace>/<table>`: where a job's or a stream
/// group's children are staged for `nodetool import --keep-repaired`. `None` when the
/// table directory is not `<keyspace>/<table>[-<id>]`.
pub fn staged_dir(table_dir: &Path, group: &[&str]) -> Option<PathBuf> {
    let (ks, table) = keyspace_table_of_dir(table_dir)?;
    let names = staged_names(group, &ks, &table);
    Some(names.iter().fold(table_dir.to_path_buf(), |p, n| p.join(n)))
}

/// The names below the table directory, one level each (for a walk that opens every level
/// by descriptor): `cleave-staged`, the group's names, the keyspace, the table.
pub fn staged_names<'a>(group: &[&'a str], keyspace: &'a str, table: &'a str) -> Vec<&'a str> {
    let mut names = vec![STAGED_DIR];
    names.extend_from_slice(group);
    names.push(keyspace);
    names.push(table);
    names
}

/// `<data>/<keyspace>/<table>-<id>`: the keyspace and table a table directory belongs to.
pub fn keyspace_table_of_dir(table_dir: &Path) -> Option<(String, String)> {
    let t = table_dir.file_name()?.to_str()?;
    let table = t.split_once('-').map_or(t, |(n, _)| n);
    let ks = table_dir.parent()?.file_name()?.to_str()?;
    if ks.is_empty() || table.is_empty() {
        return None;
    }
    Some((ks.to_string(), table.to_string()))
}

/// Whether Cassandra 5.0's import would list sstables directly in `dir`: its last two
/// names carry no `-`, or the last is `<table>-<32 hex>`.
pub fn importable_by_5_0(dir: &Path) -> bool {
    let name = |p: Option<&Path>| {
        p.and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .map(str::to_string)
    };
    let (Some(last), Some(up)) = (name(Some(dir)), name(dir.parent())) else {
        return false;
    };
    let table_ok = match last.split_once('-') {
        None => true,
        Some((t, id)) => {
            !t.is_empty() && id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
        }
    };
    table_ok && !up.contains('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_dir_staged_dir_ends_in_keyspace_and_table() {
        let t = Path::new("/var/lib/cassandra/data/ks1/events-6a3f0000000000000000000000000000");
        let s = staged_dir(t, &["repair-1234"]).unwrap();
        assert_eq!(
            s,
            t.join("cleave-staged/repair-1234/ks1/events"),
            "the job's name stays above <keyspace>/<table>"
        );
        assert!(importable_by_5_0(&s));
        let s = staged_dir(t, &["rs-1", "uid.3.0"]).unwrap();
        assert_eq!(s, t.join("cleave-staged/rs-1/uid.3.0/ks1/events"));
        assert!(importable_by_5_0(&s));
        assert_eq!(staged_dir(Path::new("/"), &["j"]), None);
    }

    #[test]
    fn import_dir_what_5_0_skips() {
        // What 5.0.9 did with each, measured (module comment).
        assert!(!importable_by_5_0(Path::new(
            "/d/ks/t-1/cleave-staged/job1"
        )));
        assert!(!importable_by_5_0(Path::new("/x/a-b/job1")));
        assert!(!importable_by_5_0(Path::new("/x/ab/c-d")));
        assert!(importable_by_5_0(Path::new("/x/ab/cd")));
        assert!(importable_by_5_0(Path::new("/x/a-b/ks/t")));
        assert!(importable_by_5_0(Path::new(
            "/x/ab/cd-0123456789abcdef0123456789abcdef"
        )));
    }
}

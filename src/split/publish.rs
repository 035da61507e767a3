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

use crate::io::fs::sync_dir;
use crate::sstable::{Component, Descriptor, FormatError, Result, SSTableId};

pub const STAGING_PREFIX: &str = ".cleave-staging-";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Publish {
    /// Leave the children in `--out` for `nodetool import`; the parent is untouched.
    Stage,
    /// Children into the parent's table directory and the parent out, atomically.
    Replace,
}

fn io_err(p: &Path) -> impl Fn(std::io::Error) -> FormatError + '_ {
    move |e| FormatError::io(p, e)
}

/// A fresh staging directory inside `out` (same filesystem, so renames are atomic).
pub fn create_staging(out: &Path) -> Result<PathBuf> {
    let dir = out.join(format!("{STAGING_PREFIX}{}", uuid::Uuid::new_v4().simple()));
    fs::create_dir(&dir).map_err(io_err(&dir))?;
    sync_dir(out).map_err(io_err(out))?;
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
    (1..=n as u32)
        .map(|i| {
            max.checked_add(i)
                .filter(|v| *v <= i32::MAX as u32)
                .ok_or_else(|| {
                    FormatError::corrupt(dirs[0], None, "no free sequence generation id below 2^31")
                })
        })
        .collect()
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

/// `Stage`: moves each child's files from staging into `out` (TOC last), fsyncs `out`.
pub fn stage(staging: &Path, out: &Path, children: &[Descriptor]) -> Result<Vec<PathBuf>> {
    let mut data_paths = Vec::new();
    for c in children {
        for f in sstable_files(staging, c)? {
            let to = out.join(f.file_name().unwrap_or_default());
            fs::rename(&f, &to).map_err(io_err(&to))?;
        }
        let mut d = c.clone();
        d.dir = out.to_path_buf();
        data_paths.push(d.path(&Component::Data));
    }
    sync_dir(out).map_err(io_err(out))?;
    fs::remove_dir(staging).map_err(io_err(staging))?;
    sync_dir(out).map_err(io_err(out))?;
    Ok(data_paths)
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
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io_err(log))?;
    f.write_all(line.as_bytes()).map_err(io_err(log))?;
    f.write_all(b"\n").map_err(io_err(log))?;
    f.sync_all().map_err(io_err(log))
}

/// Processes whose open files or memory maps lie under `data_root`: a running Cassandra
/// cannot see files created behind its back and would collide on generation ids, so
/// `Replace` refuses while any exists. Read from `/proc/<pid>/fd` and `/proc/<pid>/maps`.
pub fn processes_holding(data_root: &Path) -> Vec<(u32, String)> {
    let root = fs::canonicalize(data_root).unwrap_or_else(|_| data_root.to_path_buf());
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.filter_map(|e| e.ok()) {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let mut holds = false;
        if let Ok(fds) = fs::read_dir(p.path().join("fd")) {
            holds = fds
                .filter_map(|e| e.ok())
                .any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t.starts_with(&root)));
        }
        if !holds {
            if let Ok(maps) = fs::read_to_string(p.path().join("maps")) {
                let r = root.to_string_lossy();
                holds = maps.lines().any(|l| {
                    l.split_whitespace()
                        .nth(5)
                        .is_some_and(|f| f.starts_with(r.as_ref()))
                });
            }
        }
        if holds {
            let cmd = fs::read(p.path().join("cmdline"))
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .replace('\0', " ")
                        .trim()
                        .to_string()
                })
                .unwrap_or_default();
            found.push((pid, cmd));
        }
    }
    found
}

/// Crash injection for tests (`CLEAVE_CRASH_AT=<point>`, see `io::fault`): the points of
/// `replace` keep their historical short names (logged, renamed, committed).
fn crash_point(point: &str) {
    crate::io::fault::point(point);
}

/// `Replace`: ADD children, REMOVE parent, move children in, COMMIT, delete the parent,
/// delete the log. Before COMMIT a crash rolls back to the parent; after it, forward to the
/// children.
pub fn replace(
    staging: &Path,
    table_dir: &Path,
    parent: &Descriptor,
    children: &[Descriptor],
    op: &str,
) -> Result<Vec<PathBuf>> {
    let log = table_dir.join(format!(
        "{}_txn_{op}_{}.log",
        parent.version,
        uuid::Uuid::now_v1(&[0x63, 0x6c, 0x65, 0x61, 0x76, 0x65])
    ));
    let mut finals = Vec::new();
    for c in children {
        let mut d = c.clone();
        d.dir = table_dir.to_path_buf();
        let n = sstable_files(staging, c)?.len() as i32;
        append_line(&log, &log_record("ADD", &base_path(&d)?, 0, n))?;
        finals.push(d);
    }
    let parent_files = sstable_files(&parent.dir, parent)?;
    let mut mtime_ms = 0i64;
    for f in &parent_files {
        let m = fs::metadata(f).map_err(io_err(f))?;
        mtime_ms = mtime_ms.max(m.mtime() * 1000 + m.mtime_nsec() / 1_000_000);
    }
    append_line(
        &log,
        &log_record(
            "REMOVE",
            &base_path(parent)?,
            mtime_ms,
            parent_files.len() as i32,
        ),
    )?;
    sync_dir(table_dir).map_err(io_err(table_dir))?;
    crash_point("logged");
    for c in children {
        for f in sstable_files(staging, c)? {
            let to = table_dir.join(f.file_name().unwrap_or_default());
            fs::rename(&f, &to).map_err(io_err(&to))?;
        }
    }
    sync_dir(table_dir).map_err(io_err(table_dir))?;
    crash_point("renamed");
    append_line(&log, &log_record("COMMIT", "", 0, 0))?;
    crash_point("committed");
    finish_commit(&log, table_dir)?;
    fs::remove_dir(staging).map_err(io_err(staging))?;
    sync_dir(table_dir).map_err(io_err(table_dir))?;
    Ok(finals.iter().map(|d| d.path(&Component::Data)).collect())
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

fn delete_sstable_prefix(prefix: &str) -> Result<usize> {
    let p = Path::new(prefix);
    let dir = p.parent().unwrap_or(Path::new("."));
    let base = format!("{}-", p.file_name().and_then(|n| n.to_str()).unwrap_or(""));
    let mut n = 0;
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|f| f.starts_with(&base)))
        .map(|e| e.path())
        .collect();
    // TOC first: a half-deleted sstable without TOC.txt is not taken for a complete one.
    files.sort_by_key(|f| !f.to_string_lossy().ends_with("TOC.txt"));
    for f in files {
        fs::remove_file(&f).map_err(io_err(&f))?;
        n += 1;
    }
    Ok(n)
}

fn finish_commit(log: &Path, table_dir: &Path) -> Result<()> {
    let (recs, _) = parse_log(log)?;
    for r in recs.iter().filter(|r| r.kind == "REMOVE") {
        delete_sstable_prefix(&r.path)?;
    }
    sync_dir(table_dir).map_err(io_err(table_dir))?;
    fs::remove_file(log).map_err(io_err(log))?;
    sync_dir(table_dir).map_err(io_err(table_dir))
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
/// sstables. Leftover staging directories are removed.
pub fn recover(table_dir: &Path) -> Result<Vec<Recovery>> {
    let mut out = Vec::new();
    let mut logs: Vec<PathBuf> = fs::read_dir(table_dir)
        .map_err(io_err(table_dir))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains("_txn_") && n.ends_with(".log"))
        })
        .collect();
    logs.sort();
    for log in logs {
        let (recs, committed) = parse_log(&log)?;
        let victim = if committed { "REMOVE" } else { "ADD" };
        let mut removed = Vec::new();
        for r in recs.iter().filter(|r| r.kind == victim) {
            delete_sstable_prefix(&r.path)?;
            removed.push(r.path.clone());
        }
        sync_dir(table_dir).map_err(io_err(table_dir))?;
        fs::remove_file(&log).map_err(io_err(&log))?;
        sync_dir(table_dir).map_err(io_err(table_dir))?;
        out.push(Recovery {
            log,
            committed,
            removed,
        });
    }
    remove_staging_dirs(table_dir)?;
    Ok(out)
}

/// Removes leftover staging directories of interrupted splits (their children were never
/// published).
pub fn remove_staging_dirs(dir: &Path) -> Result<usize> {
    let mut n = 0;
    for e in fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok())
    {
        if e.file_name()
            .to_str()
            .is_some_and(|s| s.starts_with(STAGING_PREFIX))
            && e.path().is_dir()
        {
            fs::remove_dir_all(e.path()).map_err(io_err(&e.path()))?;
            n += 1;
        }
    }
    if n > 0 {
        sync_dir(dir).map_err(io_err(dir))?;
    }
    Ok(n)
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

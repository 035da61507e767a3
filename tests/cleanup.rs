//! `cleave cleanup` (issue 19): after a cleanup the live sstables hold exactly the parents'
//! keys in the owned ranges, judged by the independent `sstcheck.py` (`SSTCHECK_RANGES`) and,
//! where the schema is known, by cqlite's rows; a wholly owned sstable keeps its inode, a
//! wholly unowned one is gone, children keep the parent's repair metadata, level and
//! commit-log intervals; every refusal has its reason and changes nothing; a kill at every
//! fault point followed by `cleave recover` leaves either every parent or the cleaned table.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cleave::sstable::{SSTable, Token};
use common::*;

const MIN: i64 = i64::MIN;

/// `cleave gen` of one small sstable (`nb`, 8 KiB partitions, 4 KiB LZ4 chunks) in `dir`.
fn gen(dir: &Path, generation: u32, seed: u64, size: &str) -> PathBuf {
    let out = Command::new(cleave_bin())
        .args(["gen", "--out"])
        .arg(dir)
        .args([
            "--size",
            size,
            "--partition-size",
            "8KiB",
            "--chunk",
            "4KiB",
        ])
        .args(["--generation", &generation.to_string()])
        .args(["--seed", &seed.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join(format!("nb-{generation}-big-Data.db"))
}

/// Murmur3 tokens of an sstable's keys, in index order.
fn tokens(data: &Path) -> Vec<i64> {
    let t = SSTable::open(data).unwrap();
    let mut r = t.index_reader().unwrap();
    let mut v = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        match t.partitioner.token(e.key) {
            Token::Murmur3(x) => v.push(x),
            other => panic!("not Murmur3: {other:?}"),
        }
    }
    v
}

fn yaml(ranges: &[(i64, i64)]) -> String {
    ranges
        .iter()
        .map(|(l, r)| format!("- {{start: \"{l}\", end: \"{r}\"}}\n"))
        .collect()
}

fn env_ranges(ranges: &[(i64, i64)]) -> String {
    ranges
        .iter()
        .map(|(l, r)| format!("{l}:{r}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The complement of disjoint non-wrapping ranges, as `(l, r]` ranges (one wraps).
fn complement(ranges: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut s = ranges.to_vec();
    s.sort();
    let mut v = Vec::new();
    for w in s.windows(2) {
        if w[0].1 != w[1].0 {
            v.push((w[0].1, w[1].0));
        }
    }
    if let (Some(first), Some(last)) = (s.first(), s.last()) {
        if last.1 != first.0 {
            v.push((last.1, first.0));
        }
    }
    v
}

/// (count, xor, sum) as sstcheck prints them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Fp(u64, u64, u64);

impl Fp {
    fn of(v: &serde_json::Value) -> Fp {
        let h = |k: &str| u64::from_str_radix(v[k].as_str().unwrap(), 16).unwrap();
        Fp(
            v["partitions"].as_u64().unwrap(),
            h("keys_xor"),
            h("keys_sum"),
        )
    }
    fn add(&mut self, o: Fp) {
        self.0 += o.0;
        self.1 ^= o.1;
        self.2 = self.2.wrapping_add(o.2);
    }
}

/// sstcheck over `paths` (each must pass): (all keys, keys in `ranges`), merged.
fn sstcheck_fp(shared: &Path, paths: &[PathBuf], ranges: &[(i64, i64)]) -> (Fp, Fp) {
    let mut c = Command::new("python3");
    c.arg(shared.join("tools/sstcheck.py")).args(paths);
    if !ranges.is_empty() {
        c.env("SSTCHECK_RANGES", env_ranges(ranges));
    }
    let out = c.output().unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        paths.len(),
        "sstcheck: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut all, mut inr) = (Fp::default(), Fp::default());
    for (p, l) in paths.iter().zip(&lines) {
        assert_eq!(
            l["ok"],
            true,
            "sstcheck rejects {}: {}",
            p.display(),
            l["errors"]
        );
        all.add(Fp::of(l));
        if !ranges.is_empty() {
            inr.add(Fp::of(&l["in_ranges"]));
        }
    }
    (all, inr)
}

fn cleanup_cmd(table: &Path, ranges_file: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(cleave_bin());
    c.arg("cleanup")
        .arg(table)
        .arg("--owned-ranges")
        .arg(ranges_file)
        .args(extra)
        .arg("--json");
    c
}

fn cleanup(table: &Path, ranges: &[(i64, i64)], extra: &[&str]) -> serde_json::Value {
    let f = table.parent().unwrap().join(format!(
        "owned-{}.yaml",
        table.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&f, yaml(ranges)).unwrap();
    let out = cleanup_cmd(table, &f, extra).output().unwrap();
    assert!(
        out.status.success(),
        "cleanup failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The tiny range `(t - 1, t]` that owns exactly the key of token `t`.
fn just(t: i64) -> (i64, i64) {
    (t - 1, t)
}

fn stats(data: &Path) -> cleave::sstable::statistics::Stats {
    SSTable::open(data)
        .unwrap()
        .statistics
        .stats
        .clone()
        .expect("STATS")
}

fn inode(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().ino()
}

/// A scratch directory on XFS with reflink when the machine can mount one, else in /tmp.
struct Scratch {
    _xfs: Option<cleave::io::loopfs::LoopMount>,
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

fn scratch(test: &str) -> Scratch {
    let xfs = xfs_or_skip(test, 512 << 20);
    let tmp = match &xfs {
        Some(m) => tempfile::tempdir_in(&m.mount_point).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let root = tmp.path().to_path_buf();
    Scratch {
        _xfs: xfs,
        _tmp: tmp,
        root,
    }
}

fn table_dir(root: &Path) -> PathBuf {
    let t = root.join("ks/t-0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&t).unwrap();
    t
}

/// Anticompacts `data` over the whole ring with `flag` (`--repaired-at MS` or
/// `--pending-repair UUID`), in place: its one child is a repaired (or pending) sstable.
fn mark(data: &Path, flag: &[&str]) {
    let table = data.parent().unwrap();
    let whole = table.parent().unwrap().join("whole.yaml");
    std::fs::write(&whole, yaml(&[(0, 0)])).unwrap();
    let out = Command::new(cleave_bin())
        .arg("split")
        .arg(data)
        .arg("--out")
        .arg(table)
        .arg("--ranges")
        .arg(&whole)
        .args(flag)
        .args(["--publish", "replace", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// cqlite's rows (each as compact JSON, sorted) and partition keys (hex, sorted) of `data`,
/// read one sstable at a time (cqlite merges several in Murmur3 order, which duplicates
/// partitions of other partitioners; these sstables never share a partition).
fn cqlite(schema: &Path, ks: &str, table: &str, data: &[PathBuf]) -> (Vec<String>, Vec<String>) {
    let (mut rows, mut keys) = (Vec::new(), Vec::new());
    for d in data {
        let (r, k) = cqlite_one(schema, ks, table, d);
        rows.extend(r);
        keys.extend(k);
    }
    rows.sort();
    keys.sort();
    (rows, keys)
}

fn cqlite_one(schema: &Path, ks: &str, table: &str, data: &Path) -> (Vec<String>, Vec<String>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/cqlite_dump.py");
    let mut args: Vec<&std::ffi::OsStr> = vec![
        script.as_os_str(),
        "--schema".as_ref(),
        schema.as_os_str(),
        "--keyspace".as_ref(),
        ks.as_ref(),
        "--table".as_ref(),
        table.as_ref(),
    ];
    args.push(data.as_os_str());
    let v = python_json(&args);
    assert!(v.get("error").is_none(), "cqlite: {}", v["error"]);
    let mut rows: Vec<String> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.to_string())
        .collect();
    rows.sort();
    let mut keys: Vec<String> = v["partition_keys_hex"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    keys.sort();
    (rows, keys)
}

fn copy_table(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn verdicts(r: &serde_json::Value) -> BTreeMap<String, String> {
    r["sstables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let p = PathBuf::from(s["path"].as_str().unwrap());
            (
                p.file_name().unwrap().to_string_lossy().to_string(),
                s["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn generated_table_kept_dropped_split_with_metadata_and_rows() {
    let Some(shared) = corpus_or_skip("cleanup generated table") else {
        return;
    };
    let s = scratch("cleanup generated table (reflink part)");
    let table = table_dir(&s.root);
    let a = gen(&table, 1, 11, "512KiB");
    let b = gen(&table, 2, 12, "512KiB");
    let c = gen(&table, 3, 13, "512KiB");
    let d0 = gen(&table, 4, 14, "512KiB");
    let e0 = gen(&table, 5, 15, "512KiB");
    mark(&d0, &["--repaired-at", "1700000000000"]);
    mark(
        &e0,
        &["--pending-repair", "0b3f5e60-9d4b-11ee-8c90-0242ac120002"],
    );
    let d = table.join("nb-6-big-Data.db");
    let e = table.join("nb-7-big-Data.db");
    assert!(d.exists() && e.exists(), "{:?}", names(&table));
    assert_eq!(stats(&d).repaired_at, 1700000000000);
    assert!(stats(&e).pending_repair.flatten().is_some());

    // A wholly owned; B wholly unowned; C, D, E owned in blocks of consecutive keys (runs of
    // 10 and more partitions, 20+ chunks: zero-copy children) and 3-key blocks (small runs,
    // merged into one regrid child).
    let mut owned: Vec<(i64, i64)> = tokens(&a).into_iter().map(just).collect();
    for p in [&c, &d, &e] {
        let t = tokens(p);
        let n = t.len();
        assert!(n >= 60, "{n} partitions");
        for (i, tok) in t.iter().enumerate() {
            if i < 12 || (25..45).contains(&i) || (50..53).contains(&i) || i >= n - 6 {
                owned.push(just(*tok));
            }
        }
    }
    owned.sort();
    owned.dedup();
    let parents = [a.clone(), b.clone(), c.clone(), d.clone(), e.clone()];
    let (parent_all, parent_owned) = sstcheck_fp(&shared, &parents, &owned);
    let parent_stats: Vec<_> = parents.iter().map(|p| stats(p)).collect();
    let a_inode = inode(&a);
    let a_bytes = std::fs::read(&a).unwrap();
    // The dropped keys' partner: the same table cleaned to the complement.
    let other = s.root.join("ks2/t-0123456789abcdef0123456789abcdef");
    copy_table(&table, &other);

    let dry = cleanup(&table, &owned, &["--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    let expect: BTreeMap<String, String> = [
        ("nb-1-big-Data.db", "kept"),
        ("nb-2-big-Data.db", "dropped"),
        ("nb-3-big-Data.db", "split"),
        ("nb-6-big-Data.db", "split"),
        ("nb-7-big-Data.db", "split"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(verdicts(&dry), expect);
    assert_eq!(names(&table), names(&other), "a dry run writes nothing");

    let r = cleanup(&table, &owned, &[]);
    assert_eq!(verdicts(&r), expect);
    assert_eq!(
        (
            r["kept"].as_u64(),
            r["dropped"].as_u64(),
            r["split"].as_u64()
        ),
        (Some(1), Some(1), Some(3))
    );
    // Kept: the same file. Dropped: gone.
    assert_eq!(inode(&a), a_inode, "a wholly owned sstable keeps its inode");
    assert_eq!(std::fs::read(&a).unwrap(), a_bytes);
    let left = names(&table);
    assert!(
        !left.iter().any(|n| n.starts_with("nb-2-")
            || n.starts_with("nb-3-")
            || n.starts_with("nb-6-")
            || n.starts_with("nb-7-")),
        "{left:?}"
    );
    assert!(
        !left
            .iter()
            .any(|n| n.contains("_txn_") || n.starts_with('.')),
        "{left:?}"
    );
    let live = data_files(&table);
    // Every live sstable passes sstcheck; the children start at position 0 (unknown target).
    let children: Vec<PathBuf> = live.iter().filter(|p| **p != a).cloned().collect();
    sstcheck_all_from_zero(&shared, &children);
    let (live_all, live_owned) = sstcheck_fp(&shared, &live, &owned);
    assert_eq!(
        live_all, parent_owned,
        "live keys = the parents' keys in the owned ranges"
    );
    assert_eq!(live_owned, parent_owned);
    assert!(parent_all.0 > parent_owned.0);
    // Children keep the parent's metadata: per split sstable, its children's Statistics.
    for (si, sst) in r["sstables"].as_array().unwrap().iter().enumerate() {
        let ps = &parent_stats[si];
        let kids = sst["children"].as_array().cloned().unwrap_or_default();
        if sst["verdict"] == "split" {
            assert!(kids.len() >= 2, "{sst}");
            assert!(
                kids.iter().any(|k| k["layout"] == "regrid"),
                "small runs merge: {sst}"
            );
            assert!(kids.iter().any(|k| k["layout"] != "regrid"), "{sst}");
        }
        for k in kids {
            let cs = stats(Path::new(k["path"].as_str().unwrap()));
            assert_eq!(cs.repaired_at, ps.repaired_at);
            assert_eq!(cs.pending_repair, ps.pending_repair);
            assert_eq!(cs.is_transient, ps.is_transient);
            assert_eq!(cs.sstable_level, ps.sstable_level);
            assert_eq!(cs.commit_log_intervals, ps.commit_log_intervals);
            assert_eq!(cs.commit_log_upper_bound, ps.commit_log_upper_bound);
        }
    }
    assert!(parent_stats[4].pending_repair.flatten().is_some());
    if s._xfs.is_some() {
        assert!(
            r["bytes_shared"].as_u64().unwrap() > 0,
            "children share on XFS: {r}"
        );
    }

    // cqlite: the rows of the cleaned table and of the copy cleaned to the complement are,
    // together, exactly the parents' rows; each side's partition keys are its own.
    if !cqlite_available() {
        eprintln!("SKIP cqlite comparison: python package cqlite-py is not installed");
        return;
    }
    let schema = table.join("schema.cql");
    let (prow, pkeys) = cqlite(&schema, "ks", "t", &parents_in(&other));
    let r2 = cleanup(&other, &complement(&owned), &[]);
    assert_eq!(
        r2["kept"], 1,
        "B is wholly in the complement: {}",
        r2["sstables"]
    );
    let (orow, okeys) = cqlite(&schema, "ks", "t", &data_files(&table));
    let (crow, ckeys) = cqlite(&schema, "ks", "t", &data_files(&other));
    let mut rows = orow.clone();
    rows.extend(crow);
    rows.sort();
    assert_eq!(rows, prow, "owned rows + unowned rows = the parents' rows");
    let mut keys = okeys.clone();
    keys.extend(ckeys);
    keys.sort();
    assert_eq!(keys, pkeys);
    assert_eq!(okeys.len() as u64, parent_owned.0);
    for k in &okeys {
        let t = cleave::sstable::token::murmur3_token(&unhex(k));
        assert!(
            owned.iter().any(|(l, r)| *l < t && t <= *r),
            "{k} is not owned"
        );
    }
}

fn parents_in(dir: &Path) -> Vec<PathBuf> {
    data_files(dir)
}

#[test]
fn vnode_ring_cleanup_owns_a_third() {
    let Some(shared) = corpus_or_skip("cleanup vnode ring") else {
        return;
    };
    let s = scratch("cleanup vnode ring (reflink part)");
    let table = table_dir(&s.root);
    for g in 1..=3 {
        gen(&table, g, 100 + g as u64, "2MiB");
    }
    let owned = ring_ranges(3, 16, 0);
    assert_eq!(owned.len(), 16);
    let parents = data_files(&table);
    let (_, want) = sstcheck_fp(&shared, &parents, &owned);
    let r = cleanup(&table, &owned, &[]);
    assert_eq!(r["split"], 3, "{r}");
    let (live, _) = sstcheck_fp(&shared, &data_files(&table), &[]);
    assert_eq!(live, want);
    sstcheck_all_from_zero(&shared, &data_files(&table));
    eprintln!(
        "vnode ring: {} children, shared {} copied {} re-encoded {}, {} partitions dropped",
        r["children"],
        r["bytes_shared"],
        r["bytes_copied"],
        r["bytes_reencoded"],
        r["partitions_dropped"]
    );
}

/// The ranges node `node` owns in a ring of `nodes` nodes with `vnodes` tokens each, RF 1:
/// tokens evenly spaced and dealt round-robin, node i owning `(prev, t]` of each of its
/// tokens (as `TokenMetadata` assigns a primary range).
fn ring_ranges(nodes: u64, vnodes: u64, node: u64) -> Vec<(i64, i64)> {
    let n = nodes * vnodes;
    let step = u64::MAX / n;
    let tok = |i: u64| (i64::MIN as i128 + (i as i128) * step as i128 + 1) as i64;
    (0..n)
        .filter(|i| i % nodes == node)
        .map(|i| {
            let prev = if i == 0 { tok(n - 1) } else { tok(i - 1) };
            (prev, tok(i))
        })
        .collect()
}

#[test]
fn corpus_cleanup_keeps_the_owned_keys_and_rows() {
    let Some(shared) = corpus_or_skip("cleanup corpus") else {
        return;
    };
    let have_cqlite = cqlite_available();
    let (mut cleaned, mut compared, mut skipped) = (0, 0, 0);
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for r in manifest(&shared)
        .into_iter()
        .filter(|r| is_supported_big(r) && !is_damaged(r) && r.partitions >= 2)
    {
        let work = tempfile::tempdir().unwrap();
        let table = table_dir(work.path());
        let name = r.data_db.file_name().unwrap().to_str().unwrap();
        let prefix = name.strip_suffix("Data.db").unwrap();
        for e in std::fs::read_dir(r.data_db.parent().unwrap()).unwrap() {
            let e = e.unwrap();
            let n = e.file_name().into_string().unwrap();
            if n.starts_with(prefix) {
                std::fs::copy(e.path(), table.join(&n)).unwrap();
            }
        }
        let parent = table.join(name);
        let t = SSTable::open(&parent).unwrap();
        let p = t.partitioner;
        let mut keys_tokens: Vec<(Vec<u8>, Token)> = Vec::new();
        {
            let mut ir = t.index_reader().unwrap();
            while let Some(e) = ir.next_entry().unwrap() {
                keys_tokens.push((e.key.to_vec(), p.token(e.key)));
            }
        }
        let mut toks: Vec<Token> = keys_tokens.iter().map(|(_, t)| t.clone()).collect();
        toks.sort();
        toks.dedup();
        let n = toks.len();
        // Two owned ranges, one wrapping around the ring: about half the keys, in two runs.
        let q = |f: usize| toks[(f * n / 6).min(n - 1)].clone();
        let pick = |v: Vec<(Token, Token)>| -> Vec<(Token, Token)> {
            v.into_iter().filter(|(l, r)| l != r).collect()
        };
        let owned = pick(vec![(q(2), q(4)), (q(5), q(1))]);
        let comp = pick(vec![(q(1), q(2)), (q(4), q(5))]);
        if owned.is_empty() {
            skipped += 1;
            continue;
        }
        let other = work.path().join("other/t-0123456789abcdef0123456789abcdef");
        copy_table(&table, &other);
        // The parent's keys in the owned ranges: sstcheck's own range test for Murmur3;
        // for the others (its ranges are Murmur3 integers) by the ranges' definition here.
        let (pall, _) = sstcheck_fp(&shared, std::slice::from_ref(&parent), &[]);
        let powned = match p {
            cleave::sstable::Partitioner::Murmur3 => {
                let m = |t: &Token| match t {
                    Token::Murmur3(x) => *x,
                    _ => unreachable!(),
                };
                let o: Vec<(i64, i64)> = owned.iter().map(|(l, r)| (m(l), m(r))).collect();
                sstcheck_fp(&shared, std::slice::from_ref(&parent), &o).1
            }
            _ => {
                let mut f = cleave::sstable::fingerprint::Fingerprint::default();
                for (k, tk) in &keys_tokens {
                    if owned.iter().any(|(l, r)| {
                        cleave::sstable::TokenRange::new(l.clone(), r.clone()).contains(p, tk)
                    }) {
                        f.add(k);
                    }
                }
                Fp(f.count, f.xor, f.sum)
            }
        };
        let label = format!("{} ({p:?})", r.data_db.display());
        let rep = cleanup_tokens(&table, &owned);
        *seen
            .entry(match rep["sstables"][0]["verdict"].as_str().unwrap() {
                "kept" => "kept",
                "dropped" => "dropped",
                _ => "split",
            })
            .or_default() += 1;
        let live = data_files(&table);
        let (lall, _) = sstcheck_fp(&shared, &live, &[]);
        assert_eq!(
            lall, powned,
            "{label}: live keys = the parent's keys in the owned ranges"
        );
        if rep["sstables"][0]["verdict"] == "split" {
            sstcheck_all_from_zero(&shared, &live);
        }
        cleaned += 1;
        if have_cqlite && ["na", "nb", "oa"].contains(&r.version.as_str()) {
            if let (Some(schema), Some((ks, tb))) = (&r.schema_file, r.table.split_once('/')) {
                let (prow, pkeys) = cqlite(schema, ks, tb, std::slice::from_ref(&other.join(name)));
                if !comp.is_empty() {
                    cleanup_tokens(&other, &comp);
                }
                let (orow, okeys) = cqlite(schema, ks, tb, &live);
                let (crow, ckeys) = if comp.is_empty() {
                    (Vec::new(), Vec::new())
                } else {
                    cqlite(schema, ks, tb, &data_files(&other))
                };
                let mut rows = orow;
                rows.extend(crow);
                rows.sort();
                assert_eq!(
                    rows, prow,
                    "{label}: cqlite rows: owned + unowned = the parent's"
                );
                let mut keys = okeys;
                keys.extend(ckeys);
                keys.sort();
                assert_eq!(keys, pkeys, "{label}");
                compared += 1;
            }
        }
        assert!(pall.0 >= powned.0);
    }
    eprintln!("{cleaned} corpus sstables cleaned ({seen:?}), {compared} compared with cqlite, {skipped} skipped (one token)");
    assert!(cleaned >= 50, "only {cleaned}");
    assert!(seen.get("split").copied().unwrap_or(0) >= 20, "{seen:?}");
    if have_cqlite {
        assert!(compared >= 8, "only {compared} cqlite comparisons");
    }
}

/// `cleanup` with ranges of any partitioner's tokens (printed as the ranges file takes them).
fn cleanup_tokens(table: &Path, ranges: &[(Token, Token)]) -> serde_json::Value {
    let f = table.parent().unwrap().join("owned-tokens.yaml");
    let text: String = ranges
        .iter()
        .map(|(l, r)| format!("- {{start: \"{l}\", end: \"{r}\"}}\n"))
        .collect();
    std::fs::write(&f, text).unwrap();
    let out = cleanup_cmd(table, &f, &[]).output().unwrap();
    assert!(
        out.status.success(),
        "cleanup failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs cleanup expecting a refusal; returns the JSON error.
fn refused(table: &Path, ranges_yaml: &str, extra: &[&str]) -> serde_json::Value {
    let f = table.parent().unwrap().join("refused.yaml");
    std::fs::write(&f, ranges_yaml).unwrap();
    let out = cleanup_cmd(table, &f, extra).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["error"].clone()
}

#[test]
fn refusals_have_their_reason_and_change_nothing() {
    let d = tempfile::tempdir().unwrap();
    let table = table_dir(d.path());
    gen(&table, 1, 1, "256KiB");
    gen(&table, 2, 2, "256KiB");
    let half = yaml(&[(MIN, 0)]);
    let before = snapshot(&table);
    let check = |what: &str, e: &serde_json::Value, reason: &str| {
        assert_eq!(e["reason"], reason, "{what}: {e}");
        assert_eq!(snapshot(&table), before, "{what}: nothing changed");
    };
    check(
        "empty ranges",
        &refused(&table, "[]", &[]),
        "InvalidRequest",
    );
    check(
        "overlap",
        &refused(&table, &yaml(&[(MIN, 10), (5, 20)]), &[]),
        "InvalidRequest",
    );
    check(
        "wrap overlap",
        &refused(&table, &yaml(&[(100, -100), (-200, -150)]), &[]),
        "InvalidRequest",
    );
    check(
        "stage into the table",
        &refused(
            &table,
            &half,
            &["--publish", "stage", "--out", table.to_str().unwrap()],
        ),
        "InvalidRequest",
    );
    check(
        "stage without --out",
        &refused(&table, &half, &["--publish", "stage"]),
        "InvalidRequest",
    );
    // A live process holding a file of the table: Cassandra running.
    let data = table.join("nb-1-big-Data.db");
    let mut holder = KillOnDrop(
        Command::new("sh")
            .arg("-c")
            .arg("exec 3<\"$0\"; exec sleep 60")
            .arg(&data)
            .spawn()
            .unwrap(),
    );
    for _ in 0..50 {
        if cleave::split::publish::processes_holding(&table)
            .iter()
            .any(|(pid, _)| *pid == holder.0.id())
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    check(
        "cassandra running",
        &refused(&table, &half, &[]),
        "CassandraRunning",
    );
    let _ = holder.0.kill();
    let _ = holder.0.wait();
    // An unfinished transaction log (Cassandra compacting, or an interrupted operation).
    let log = table.join("nb_txn_compaction_0b3f5e60-9d4b-11ee-8c90-0242ac120002.log");
    std::fs::write(&log, "").unwrap();
    let before_log = snapshot(&table);
    let e = refused(&table, &half, &[]);
    assert_eq!(e["reason"], "TableBusy", "{e}");
    assert_eq!(snapshot(&table), before_log);
    std::fs::remove_file(&log).unwrap();
    // Secondary indexes: a legacy index's directory, an SAI component.
    let idx = table.join(".t_v_idx");
    std::fs::create_dir(&idx).unwrap();
    let e = refused(&table, &half, &["--dry-run"]);
    assert_eq!(e["reason"], "SecondaryIndexPresent", "{e}");
    assert!(e["message"].as_str().unwrap().contains(".t_v_idx"), "{e}");
    std::fs::remove_dir(&idx).unwrap();
    let sai = table.join("nb-1-big-SAI+aa+GroupComplete.db");
    std::fs::write(&sai, b"").unwrap();
    let e = refused(&table, &half, &[]);
    assert_eq!(e["reason"], "SecondaryIndexPresent", "{e}");
    std::fs::remove_file(&sai).unwrap();
    assert_eq!(snapshot(&table), before);
    // And then it runs.
    let r = cleanup(&table, &[(MIN, 0)], &[]);
    assert_eq!(r["split"], 2, "{r}");
}

/// A table of four sstables for the crash campaign: one kept, one dropped, two split.
struct World {
    _d: tempfile::TempDir,
    table: PathBuf,
    ranges: PathBuf,
}

fn world(template: &Path) -> World {
    let d = tempfile::tempdir().unwrap();
    let table = table_dir(d.path());
    copy_table(template, &table);
    let ranges = d.path().join("owned.yaml");
    std::fs::copy(template.parent().unwrap().join("owned.yaml"), &ranges).unwrap();
    World {
        _d: d,
        table,
        ranges,
    }
}

fn flat(dir: &Path) -> Vec<(String, Vec<u8>)> {
    names(dir)
        .into_iter()
        .map(|n| {
            let b = std::fs::read(dir.join(&n)).unwrap_or_default();
            (n, b)
        })
        .collect()
}

#[test]
fn kill_at_every_fault_point_then_recover() {
    let Some(shared) = corpus_or_skip("cleanup crash campaign") else {
        return;
    };
    let tpl = tempfile::tempdir().unwrap();
    let template = tpl.path().join("table");
    std::fs::create_dir_all(&template).unwrap();
    let a = gen(&template, 1, 21, "256KiB");
    gen(&template, 2, 22, "256KiB");
    let c = gen(&template, 3, 23, "256KiB");
    let d = gen(&template, 4, 24, "256KiB");
    let mut owned: Vec<(i64, i64)> = tokens(&a).into_iter().map(just).collect();
    for p in [&c, &d] {
        for (i, t) in tokens(p).into_iter().enumerate() {
            if i % 20 < 12 {
                owned.push(just(t));
            }
        }
    }
    owned.sort();
    std::fs::write(tpl.path().join("owned.yaml"), yaml(&owned)).unwrap();
    let original = flat(&template);
    let parents = data_files(&template);
    let (_, want) = sstcheck_fp(&shared, &parents, &owned);
    let (all, _) = sstcheck_fp(&shared, &parents, &[]);

    // The points an unharmed run reaches, with their counts.
    let w = world(&template);
    let list = w._d.path().join("points");
    let out = cleanup_cmd(&w.table, &w.ranges, &[])
        .env("CLEAVE_CRASH_LIST", &list)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = flat(&w.table);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for l in std::fs::read_to_string(&list).unwrap().lines() {
        *counts.entry(l.to_string()).or_default() += 1;
    }
    for p in [
        "logged",
        "renamed",
        "committed",
        "replace:renamed-file",
        "delete:sstable-file",
    ] {
        assert!(counts.contains_key(p), "{p} not reached: {counts:?}");
    }
    // Every point at its first, middle and last occurrence (all of them up to 4).
    let mut steps = Vec::new();
    for (p, n) in &counts {
        let mut at: Vec<usize> = if *n <= 4 {
            (1..=*n).collect()
        } else {
            vec![1, n.div_ceil(2), *n]
        };
        at.dedup();
        steps.extend(at.into_iter().map(|i| (p.clone(), i)));
    }
    let (mut before_commit, mut after_commit) = (0, 0);
    for (i, (point, nth)) in steps.iter().enumerate() {
        let w = world(&template);
        let what = format!("{point}@{nth}");
        let out = cleanup_cmd(&w.table, &w.ranges, &[])
            .env("CLEAVE_CRASH_AT", &what)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{what}: not killed");
        // Every third trial, recover is itself killed once first.
        if i % 3 == 0 {
            let _ = Command::new(cleave_bin())
                .arg("recover")
                .arg(&w.table)
                .env("CLEAVE_CRASH_AT", "delete:sstable-file@1")
                .output()
                .unwrap();
        }
        let rec = Command::new(cleave_bin())
            .arg("recover")
            .arg(&w.table)
            .output()
            .unwrap();
        assert!(
            rec.status.success(),
            "{what}: recover: {}",
            String::from_utf8_lossy(&rec.stderr)
        );
        let now = flat(&w.table);
        let live = data_files(&w.table);
        let (fp, _) = sstcheck_fp(&shared, &live, &[]);
        let left = names(&w.table);
        assert!(
            !left
                .iter()
                .any(|n| n.contains("_txn_") || n.starts_with('.')),
            "{what}: {left:?}"
        );
        if now == original {
            // Not committed: every parent, byte for byte, and no unowned key lost.
            assert_eq!(fp, all, "{what}");
            before_commit += 1;
        } else {
            // Committed: the cleaned table, as an unharmed run leaves it.
            assert_eq!(fp, want, "{what}: owned keys");
            assert_eq!(
                now.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                done.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                "{what}"
            );
            assert!(now.iter().any(|(n, b)| n == "nb-1-big-Data.db"
                && *b == original.iter().find(|(m, _)| m == n).unwrap().1));
            after_commit += 1;
        }
    }
    eprintln!(
        "{} kills ({} points): {before_commit} rolled back, {after_commit} rolled forward",
        steps.len(),
        counts.len()
    );
    assert!(before_commit > 0 && after_commit > 0);
}

#[test]
fn injected_eio_at_every_fallible_step_leaves_every_parent_or_the_cleaned_table() {
    let Some(shared) = corpus_or_skip("cleanup EIO campaign") else {
        return;
    };
    let tpl = tempfile::tempdir().unwrap();
    let template = tpl.path().join("table");
    std::fs::create_dir_all(&template).unwrap();
    let a = gen(&template, 1, 31, "256KiB");
    gen(&template, 2, 32, "256KiB");
    let c = gen(&template, 3, 33, "256KiB");
    let mut owned: Vec<(i64, i64)> = tokens(&a).into_iter().map(just).collect();
    for (i, t) in tokens(&c).into_iter().enumerate() {
        if i % 20 < 12 {
            owned.push(just(t));
        }
    }
    owned.sort();
    std::fs::write(tpl.path().join("owned.yaml"), yaml(&owned)).unwrap();
    let original = flat(&template);
    let (_, want) = sstcheck_fp(&shared, &data_files(&template), &owned);
    let w = world(&template);
    let list = w._d.path().join("points");
    let out = cleanup_cmd(&w.table, &w.ranges, &[])
        .env("CLEAVE_CRASH_LIST", &list)
        .output()
        .unwrap();
    assert!(out.status.success());
    let done: Vec<String> = names(&w.table);
    let fallible = [
        "txn:append",
        "fsync:dir-before",
        "replace:rename",
        "delete:file",
    ];
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for l in std::fs::read_to_string(&list).unwrap().lines() {
        if fallible.contains(&l) {
            *counts.entry(l.to_string()).or_default() += 1;
        }
    }
    assert_eq!(counts.len(), fallible.len(), "{counts:?}");
    let (mut failed, mut succeeded) = (0, 0);
    for (p, n) in &counts {
        for nth in 1..=*n {
            let w = world(&template);
            let what = format!("{p}@{nth}");
            let out = cleanup_cmd(&w.table, &w.ranges, &[])
                .env("CLEAVE_FAIL_AT", &what)
                .output()
                .unwrap();
            if out.status.success() {
                // After COMMIT a failure does not undo the cleanup: recover finishes it.
                let rec = Command::new(cleave_bin())
                    .arg("recover")
                    .arg(&w.table)
                    .output()
                    .unwrap();
                assert!(rec.status.success(), "{what}");
                assert_eq!(names(&w.table), done, "{what}");
                let (fp, _) = sstcheck_fp(&shared, &data_files(&w.table), &[]);
                assert_eq!(fp, want, "{what}");
                succeeded += 1;
            } else {
                // Before COMMIT it rolled itself back: every parent, nothing else, before
                // any recover.
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(v["error"]["reason"], "IoError", "{what}: {v}");
                assert_eq!(flat(&w.table), original, "{what}");
                failed += 1;
            }
        }
    }
    eprintln!(
        "EIO at {} steps: {failed} failed and rolled back, {succeeded} went forward",
        failed + succeeded
    );
    assert!(failed > 0 && succeeded > 0);
}

/// The table's files (name and bytes), without cleave's hidden pending directory.
fn visible(dir: &Path) -> Vec<(String, Vec<u8>)> {
    flat(dir)
        .into_iter()
        .filter(|(n, _)| !n.starts_with('.'))
        .collect()
}

/// `--publish on-restart` (Cassandra may be running): the cleanup is recorded in the
/// table's pending directory and nothing live changes; `apply-pending` (Cassandra stopped)
/// publishes it in one CLEANUP transaction — the kept sstable untouched, the dropped one
/// gone, the split ones replaced by children with the parent's repair state — exactly as
/// `--publish replace` would have. A SIGKILL of the cleanup or of apply-pending at every
/// fault point, then a complete apply-pending, leaves every parent byte for byte or exactly
/// the cleaned table: never part of it.
#[test]
fn on_restart_records_the_cleanup_and_apply_pending_publishes_it_whole_or_not_at_all() {
    let Some(shared) = corpus_or_skip("cleanup on restart") else {
        return;
    };
    let tpl = tempfile::tempdir().unwrap();
    let template = table_dir(tpl.path());
    let a = gen(&template, 1, 31, "256KiB");
    gen(&template, 2, 32, "256KiB");
    let c = gen(&template, 3, 33, "256KiB");
    let d0 = gen(&template, 4, 34, "256KiB");
    mark(&d0, &["--repaired-at", "1700000000000"]);
    let d = template.join("nb-5-big-Data.db");
    assert!(d.exists(), "{:?}", names(&template));
    let mut owned: Vec<(i64, i64)> = tokens(&a).into_iter().map(just).collect();
    for p in [&c, &d] {
        for (i, t) in tokens(p).into_iter().enumerate() {
            if i % 20 < 12 {
                owned.push(just(t));
            }
        }
    }
    owned.sort();
    std::fs::write(tpl.path().join("owned.yaml"), yaml(&owned)).unwrap();
    let template = {
        // `world` copies from a directory whose parent holds owned.yaml.
        let t = tpl.path().join("table");
        copy_table(&template, &t);
        t
    };
    let original = visible(&template);
    let parents = data_files(&template);
    let (all, want) = sstcheck_fp(&shared, &parents, &owned);
    assert!(all.0 > want.0);

    // The reference: the same table cleaned at once by `--publish replace`.
    let reference = world(&template);
    cleanup_cmd(&reference.table, &reference.ranges, &[])
        .output()
        .unwrap();
    let cleaned = data_files(&reference.table).len();
    let on_restart = [
        "--publish",
        "on-restart",
        "--job-uid",
        "j",
        "--parallelism",
        "2",
    ];

    // Unharmed.
    let w = world(&template);
    let data_dir = w._d.path();
    let out = cleanup_cmd(&w.table, &w.ranges, &on_restart)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["job_uid"], "j", "{r}");
    let expect: BTreeMap<String, String> = [
        ("nb-1-big-Data.db", "kept"),
        ("nb-2-big-Data.db", "dropped"),
        ("nb-3-big-Data.db", "split"),
        ("nb-5-big-Data.db", "split"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(verdicts(&r), expect);
    assert_eq!(
        visible(&w.table),
        original,
        "nothing live changes before the restart"
    );
    for s in r["sstables"].as_array().unwrap() {
        for k in s["children"].as_array().cloned().unwrap_or_default() {
            assert!(
                k["path"].as_str().unwrap().contains("/.cleave-pending/j/"),
                "{k}"
            );
        }
    }
    let job = w.table.join(".cleave-pending/j");
    let intent: serde_json::Value =
        serde_json::from_slice(&std::fs::read(job.join("intent.json")).unwrap()).unwrap();
    assert_eq!(intent["operation"], "cleanup");
    let recorded: Vec<(String, usize)> = intent["parents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["parent"]["data_file"].as_str().unwrap().to_string(),
                p["children"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(recorded.len(), 3, "{recorded:?}");
    assert_eq!(
        recorded[0],
        ("nb-2-big-Data.db".to_string(), 0),
        "dropped: no children"
    );
    assert!(recorded[1..].iter().all(|(_, n)| *n >= 2), "{recorded:?}");
    let a_inode = inode(&w.table.join("nb-1-big-Data.db"));

    let applied = apply_pending_ok(data_dir);
    let outcome = &applied["jobs"][0]["outcome"];
    assert_eq!(outcome["result"]["state"], "Complete", "{applied}");
    assert_eq!(outcome["operation"], "cleanup");
    let live = data_files(&w.table);
    assert_eq!(
        live.len(),
        cleaned,
        "as many sstables as the Replace leaves"
    );
    let (fp, fp_owned) = sstcheck_fp(&shared, &live, &owned);
    assert_eq!(
        fp, want,
        "live keys = the parents' keys in the owned ranges"
    );
    assert_eq!(fp_owned, want);
    sstcheck_all_from_zero(
        &shared,
        &live
            .iter()
            .filter(|p| !p.ends_with("nb-1-big-Data.db"))
            .cloned()
            .collect::<Vec<_>>(),
    );
    assert_eq!(inode(&w.table.join("nb-1-big-Data.db")), a_inode, "kept");
    assert!(!w.table.join("nb-2-big-Data.db").exists(), "dropped");
    let d_children: Vec<PathBuf> = outcome["result"]["by_parent"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["parent"] == "nb-5-big-Data.db")
        .flat_map(|p| p["children"].as_array().unwrap().clone())
        .map(|c| PathBuf::from(c.as_str().unwrap()))
        .collect();
    assert!(d_children.len() >= 2);
    for k in &d_children {
        assert_eq!(stats(k).repaired_at, 1700000000000, "{}", k.display());
    }
    let snap = flat(&w.table);
    apply_pending_ok(data_dir);
    assert_eq!(flat(&w.table), snap, "a second apply-pending is a no-op");

    // Killed at every fault point of the cleanup and of apply-pending.
    let list = tpl.path().join("points");
    let probe = world(&template);
    let pend_points = fault_points(cleanup_cmd(&probe.table, &probe.ranges, &on_restart), &list);
    let apply_points = fault_points(apply_pending(probe._d.path()), &list);
    assert!(
        pend_points.contains_key("pend:intent-written"),
        "{pend_points:?}"
    );
    assert!(
        apply_points.contains_key("apply:published"),
        "{apply_points:?}"
    );
    let (mut parents_left, mut cleaned_up) = (0, 0);
    for (phase, points) in [("cleanup", &pend_points), ("apply-pending", &apply_points)] {
        for (point, n) in points {
            let mut nths = vec![1, *n];
            nths.dedup();
            for nth in nths {
                let what = format!("{phase} killed at {point}@{nth}");
                let w = world(&template);
                let mut pend = cleanup_cmd(&w.table, &w.ranges, &on_restart);
                pend.stdout(Stdio::null());
                if phase == "cleanup" {
                    pend.env("CLEAVE_CRASH_AT", format!("{point}@{nth}"));
                    assert!(
                        !pend.output().unwrap().status.success(),
                        "{what}: not killed"
                    );
                } else {
                    assert!(pend.output().unwrap().status.success(), "{what}");
                    let out = apply_pending(w._d.path())
                        .env("CLEAVE_CRASH_AT", format!("{point}@{nth}"))
                        .output()
                        .unwrap();
                    assert!(!out.status.success(), "{what}: not killed");
                }
                apply_pending_ok(w._d.path());
                let now = visible(&w.table);
                assert!(
                    !now.iter().any(|(n, _)| n.contains("_txn_")),
                    "{what}: a log is left"
                );
                let job = w.table.join(".cleave-pending/j");
                if now == original {
                    assert!(
                        !job.exists() || names(&job) == ["outcome.json"],
                        "{what}: {:?}",
                        names(&job)
                    );
                    parents_left += 1;
                } else {
                    let live = data_files(&w.table);
                    assert_eq!(live.len(), cleaned, "{what}: {:?}", names(&w.table));
                    assert_eq!(sstcheck_fp(&shared, &live, &[]).0, want, "{what}");
                    assert_eq!(names(&job), ["outcome.json"], "{what}");
                    cleaned_up += 1;
                }
            }
        }
    }
    eprintln!(
        "cleanup on-restart campaign: {} cleanup points, {} apply points; {parents_left} kills left every parent, {cleaned_up} the cleaned table",
        pend_points.len(),
        apply_points.len()
    );
    assert!(parents_left > 0 && cleaned_up > 0);
}

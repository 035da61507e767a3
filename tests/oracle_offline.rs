//! Stock Cassandra judges every child, offline (issue 30): parents written by Cassandra's own
//! `CQLSSTableWriter` (`oracle/Oracle.java`) for each schema family, cut by every cleave
//! operation — `split --parts`, `split --tokens`, anticompaction (`--ranges --repaired-at`),
//! `cleanup --publish stage`, a RangeStream (`stream serve` + `stream send --ranges` over
//! loopback) and `rewrite` —, with the default target and with `--target-cassandra <the
//! reading version>`; then Cassandra's reader (the same program's `dump`) reads the children
//! through the index and linearly from position 0 (`getScanner()`), and both passes must equal
//! the parent's rows in the children's ranges. One test per Cassandra version, two JVMs each
//! (the parents, then every child at once). The negative controls show the oracle can fail.
//!
//! Without the installed versions (`scripts/cassandra-testenv.sh install`) the tests skip
//! saying why, except under `CI=true`, where they fail.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use common::oracle_java::{
    digest, oracle_or_skip, version_of, write_opts, Dump, Oracle, Pass, Summary, WriteOpts,
    FAMILIES,
};
use common::{cleave_bin, copy_sstable, data_files, sibling};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A cut of one parent: the children cleave wrote and which of the parent's tokens they hold.
struct Case {
    name: String,
    parent: PathBuf,
    children: Vec<PathBuf>,
    /// `(l, r]` ranges of the parent's tokens the children must hold (all of them if empty).
    ranges: Vec<(i64, i64)>,
    /// Anticompaction: `(l, r]` repaired at this time; every other child unrepaired.
    repaired: Option<((i64, i64), i64)>,
}

fn in_ranges(ranges: &[(i64, i64)], t: i64) -> bool {
    ranges.is_empty() || ranges.iter().any(|&(l, r)| l < t && t <= r)
}

fn run(args: &[&std::ffi::OsStr]) -> Result<serde_json::Value, String> {
    let out = Command::new(cleave_bin()).args(args).output().unwrap();
    if !out.status.success() {
        // With --json the error report is on stdout.
        return Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null))
}

fn s<T: AsRef<std::ffi::OsStr> + ?Sized>(x: &T) -> &std::ffi::OsStr {
    x.as_ref()
}

/// `<dir>/oracle/<family>`: Cassandra's Descriptor takes keyspace and table from the two
/// directories above the file.
fn table_dir(dir: &Path, family: &str) -> PathBuf {
    let d = dir.join("oracle").join(family);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Copies the parent table directory (all sstables) into `dir`.
fn copy_table(src: &Path, dir: &Path) -> Vec<PathBuf> {
    data_files(src)
        .iter()
        .map(|d| copy_sstable(d, dir))
        .collect()
}

/// The quantile `q` of the sorted tokens.
fn tok(tokens: &[i64], q: f64) -> i64 {
    tokens[((tokens.len() - 1) as f64 * q) as usize]
}

/// Runs every operation on `parent` for `target` (`None`: cleave's default, `unknown`), pushing
/// the cases; `Err` with cleave's message when cleave refuses the parent.
#[allow(clippy::too_many_arguments)]
fn cut(
    work: &Path,
    family: &str,
    parent: &Path,
    tokens: &[i64],
    target: Option<&str>,
    stream: &common::stream::StreamPair,
    cases: &mut Vec<Case>,
    tag: &str,
    refused: &mut Vec<String>,
) -> Result<(), String> {
    let tgt: Vec<&str> = match target {
        Some(t) => vec!["--target-cassandra", t],
        None => vec![],
    };
    let t0 = tok(tokens, 0.1);
    let t1 = tok(tokens, 0.35);
    let t2 = tok(tokens, 0.65);
    let t3 = tok(tokens, 0.9);
    let mk = |op: &str| table_dir(&work.join(format!("{tag}-{op}")), family);

    // split --parts 3
    let out = mk("parts");
    let mut a = vec![
        s("split"),
        s(parent),
        s("--out"),
        s(&out),
        s("--parts"),
        s("3"),
    ];
    a.extend(tgt.iter().map(s));
    a.push(s("--json"));
    run(&a)?;
    let parts_children = data_files(&out);
    cases.push(Case {
        name: format!("{tag} split --parts 3"),
        parent: parent.into(),
        children: parts_children.clone(),
        ranges: vec![],
        repaired: None,
    });

    // split --tokens t1,t2
    let out = mk("tokens");
    let toks = format!("{t1},{t2}");
    let mut a = vec![
        s("split"),
        s(parent),
        s("--out"),
        s(&out),
        s("--tokens"),
        s(&toks),
    ];
    a.extend(tgt.iter().map(s));
    a.push(s("--json"));
    run(&a)?;
    cases.push(Case {
        name: format!("{tag} split --tokens"),
        parent: parent.into(),
        children: data_files(&out),
        ranges: vec![],
        repaired: None,
    });

    // split --tokens t1,t2 --layout regrid: every child re-encoded on its own chunk grid
    // (what the default target falls back to where no filler fits; no family of the matrix
    // needs it, so it is asked for here). Compressed parents only: regrid re-encodes chunks.
    if sibling(parent, "CompressionInfo.db").exists() {
        let out = mk("regrid");
        let mut a = vec![
            s("split"),
            s(parent),
            s("--out"),
            s(&out),
            s("--tokens"),
            s(&toks),
            s("--layout"),
            s("regrid"),
        ];
        a.extend(tgt.iter().map(s));
        a.push(s("--json"));
        let j = run(&a)?;
        for c in j["children"].as_array().unwrap() {
            assert_eq!(c["layout"], "regrid", "{tag}: {c}");
            assert_eq!(c["dead_prefix"], 0, "{tag}: {c}");
        }
        cases.push(Case {
            name: format!("{tag} split --tokens --layout regrid"),
            parent: parent.into(),
            children: data_files(&out),
            ranges: vec![],
            repaired: None,
        });
    }

    // anticompaction: (t1, t2] repaired
    let out = mk("anti");
    let ry = work.join(format!("{tag}-anti.yaml"));
    std::fs::write(&ry, format!("- {{start: \"{t1}\", end: \"{t2}\"}}\n")).unwrap();
    let at = 1_700_000_000_123i64;
    let ats = at.to_string();
    let mut a = vec![
        s("split"),
        s(parent),
        s("--out"),
        s(&out),
        s("--ranges"),
        s(&ry),
        s("--repaired-at"),
        s(&ats),
    ];
    a.extend(tgt.iter().map(s));
    a.push(s("--json"));
    run(&a)?;
    cases.push(Case {
        name: format!("{tag} anticompaction"),
        parent: parent.into(),
        children: data_files(&out),
        ranges: vec![],
        repaired: Some(((t1, t2), at)),
    });

    // cleanup --publish stage: owned (t0, t1] and (t2, t3]
    let src = table_dir(&work.join(format!("{tag}-cleanup-src")), family);
    copy_table(parent.parent().unwrap(), &src);
    let out = mk("cleanup");
    let oy = work.join(format!("{tag}-owned.yaml"));
    std::fs::write(
        &oy,
        format!("- {{start: \"{t0}\", end: \"{t1}\"}}\n- {{start: \"{t2}\", end: \"{t3}\"}}\n"),
    )
    .unwrap();
    let mut a = vec![
        s("cleanup"),
        s(&src),
        s("--owned-ranges"),
        s(&oy),
        s("--publish"),
        s("stage"),
        s("--out"),
        s(&out),
    ];
    a.extend(tgt.iter().map(s));
    a.push(s("--json"));
    run(&a)?;
    cases.push(Case {
        name: format!("{tag} cleanup --publish stage"),
        parent: parent.into(),
        children: data_files(&out),
        ranges: vec![(t0, t1), (t2, t3)],
        repaired: None,
    });

    // RangeStream: the receiver's children of (t0, t1] and (t2, t3]
    let ranges = format!("{t0}:{t1},{t2}:{t3}");
    let prefix = format!("{tag}-{family}").replace(['.', '_'], "x");
    let mut extra = vec!["--transfer-prefix", &prefix, "--ranges", &ranges];
    extra.extend(tgt.iter().copied());
    let sent = stream.send(&[parent], &extra);
    if !sent.ok
        && sent
            .stderr
            .contains("range children need compressed chunks")
    {
        // Documented (docs/stream.md): an uncompressed parent has no chunks to carry.
        refused.push(format!("{tag} RangeStream (uncompressed)"));
    } else if !sent.ok {
        return Err(sent.stderr);
    }
    let mut children = Vec::new();
    let sent_json = if sent.ok {
        sent.json()
    } else {
        serde_json::json!([])
    };
    for (i, c) in sent_json.as_array().unwrap().iter().enumerate() {
        assert_eq!(c["verdict"]["ok"], true, "{tag}: {c}");
        let d = c["verdict"]["published"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| PathBuf::from(p.as_str().unwrap()))
            .find(|p| p.to_string_lossy().ends_with("-Data.db"))
            .unwrap();
        // Each child into its own `oracle/<family>` so Cassandra's Descriptor parses it.
        children.push(copy_sstable(
            &d,
            &table_dir(&work.join(format!("{tag}-stream{i}")), family),
        ));
    }
    if sent.ok {
        cases.push(Case {
            name: format!("{tag} RangeStream"),
            parent: parent.into(),
            children,
            ranges: vec![(t0, t1), (t2, t3)],
            repaired: None,
        });
    }

    // rewrite --force of each --parts child (the dead-prefixed ones of a 4.x/5.0.4 target
    // come back starting at position 0)
    // (each into a stage of its own: a stage directory that already holds sstables is refused)
    let mut rewritten = Vec::new();
    for (i, c) in parts_children.iter().enumerate() {
        let out = mk(&format!("rewrite{i}"));
        run(&[
            s("rewrite"),
            s(c),
            s("--publish"),
            s("stage"),
            s("--out"),
            s(&out),
            s("--force"),
            s("--json"),
        ])?;
        rewritten.extend(data_files(&out));
    }
    cases.push(Case {
        name: format!("{tag} rewrite"),
        parent: parent.into(),
        children: rewritten,
        ranges: vec![],
        repaired: None,
    });
    Ok(())
}

/// Checks one case against Cassandra's reading of the parent and the children; the number of
/// filler (empty) partitions Cassandra saw in the children.
fn judge(d: &Dump, c: &Case) -> usize {
    let parent = d.rows(std::slice::from_ref(&c.parent), Pass::Index);
    assert_eq!(
        parent,
        d.rows(std::slice::from_ref(&c.parent), Pass::Linear),
        "{}: the parent's passes differ",
        c.name
    );
    let want: Vec<_> = parent
        .into_iter()
        .filter(|p| in_ranges(&c.ranges, p.token))
        .collect();
    assert!(!want.is_empty(), "{}: nothing expected", c.name);
    assert!(!c.children.is_empty(), "{}: no children", c.name);
    for pass in [Pass::Index, Pass::Linear] {
        let got = d.rows(&c.children, pass);
        if got != want {
            let missing = want.iter().filter(|p| !got.contains(p)).count();
            let extra = got.iter().filter(|p| !want.contains(p)).count();
            panic!(
                "{}: Cassandra's {pass:?} pass of {:?} reads {} partitions (digest {:016x}), \
                 the parent has {} in range (digest {:016x}): {missing} missing, {extra} not \
                 the parent's; first extra: {:?}",
                c.name,
                c.children,
                got.len(),
                digest(&got),
                want.len(),
                digest(&want),
                got.iter().find(|p| !want.contains(p))
            );
        }
    }
    if let Some(((l, r), at)) = c.repaired {
        for ch in &c.children {
            let f = d.of(ch, Pass::Index);
            let toks: Vec<i64> = f
                .partitions
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| p.token)
                .collect();
            let inside = toks.iter().all(|&t| l < t && t <= r);
            let outside = toks.iter().all(|&t| !(l < t && t <= r));
            assert!(
                inside || outside,
                "{}: {} mixes labels",
                c.name,
                ch.display()
            );
            let want_at = if inside { at.to_string() } else { "0".into() };
            assert_eq!(
                f.meta.get("repaired_at"),
                Some(&want_at),
                "{}: repairedAt of {} as Cassandra reads it",
                c.name,
                ch.display()
            );
        }
    }
    c.children
        .iter()
        .map(|ch| {
            d.of(ch, Pass::Index)
                .partitions
                .iter()
                .chain(d.of(ch, Pass::Linear).partitions.iter())
                .filter(|p| p.is_empty())
                .count()
        })
        .sum()
}

/// Every family × operation × target, parents written by `writer_line`'s CQLSSTableWriter and
/// children judged by `reader_line`'s reader (targets: cleave's default and the reader's
/// version); prints the matrix counts.
fn matrix(test: &str, reader_line: &str, writer_line: &str, format: &'static str) {
    let (Some(or), Some(wr)) = (oracle_for(test, reader_line), oracle_for(test, writer_line))
    else {
        return;
    };
    let version = or.version.clone();
    let work = tempfile::tempdir().unwrap();
    let fams: Vec<(usize, &str)> = FAMILIES
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, f)| !(f.starts_with("tomb_") && wr.version.starts_with("4.0.")))
        .collect();
    // Parents, copied into the work directory (cleave writes children on the parent's
    // filesystem), then one JVM reads them all for their tokens.
    let mut parents = BTreeMap::new();
    for &(i, f) in &fams {
        let o = WriteOpts {
            format,
            ..write_opts(i)
        };
        let cached = wr.write_parent(f, &o);
        let files = copy_table(&cached, &table_dir(&work.path().join("parent"), f));
        assert_eq!(files.len(), 1, "{f}: one parent sstable: {files:?}");
        let want = if format == "bti" {
            "da-"
        } else if wr.version.starts_with("5.") {
            "oa-"
        } else {
            "nb-"
        };
        let name = files[0].file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with(want), "{} writes {name}", wr.version);
        parents.insert(f, (files[0].clone(), o));
    }
    let all: Vec<PathBuf> = parents.values().map(|(p, _)| p.clone()).collect();
    let pd = or.dump(&all);
    // A receiver per target: it checks received children against its node's version.
    let stream_default = common::stream::StreamPair::serve(&[]);
    let stream_own = common::stream::StreamPair::serve(&["--cassandra-version", &version]);
    let mut cases = Vec::new();
    let mut refused = Vec::new();
    for (f, (parent, o)) in &parents {
        let mut tokens: Vec<i64> = pd
            .of(parent, Pass::Index)
            .partitions
            .iter()
            .map(|p| p.token)
            .collect();
        tokens.sort();
        for target in [None, Some(version.as_str())] {
            let tag = format!("{f}-{}", target.unwrap_or("default").replace('.', "_"));
            let r = cut(
                work.path(),
                f,
                parent,
                &tokens,
                target,
                if target.is_some() {
                    &stream_own
                } else {
                    &stream_default
                },
                &mut cases,
                &tag,
                &mut refused,
            );
            if let Err(e) = r {
                panic!(
                    "{tag}: cleave refused {} ({}): {e}",
                    parent.display(),
                    o.compression
                );
            }
        }
    }
    let mut files: Vec<PathBuf> = all.clone();
    for c in &cases {
        files.extend(c.children.iter().cloned());
    }
    let d = or.dump(&files);
    let mut fillers = 0;
    let mut per_op: BTreeMap<String, usize> = BTreeMap::new();
    for c in &cases {
        fillers += judge(&d, c);
        let op = c
            .name
            .split_once(' ')
            .map(|x| x.1)
            .unwrap_or("")
            .to_string();
        *per_op.entry(op).or_default() += 1;
    }
    eprintln!(
        "MATRIX reader {version}, {format} parents by {}: {} cases passed ({} families × targets default,{version}), \
         {} children read, {fillers} filler partitions seen; by operation {per_op:?}; \
         refused as expected: {refused:?}",
        wr.version,
        cases.len(),
        parents.len(),
        files.len() - all.len()
    );
}

// Each reader judges children of parents its own line wrote (5.0: BIG `oa`), and 5.0.9 also
// those of 4.1-written `nb` parents: the sstables a node upgraded from 4.1 still holds.

#[test]
fn oracle_matrix_5_0_9() {
    matrix("oracle_matrix_5_0_9", "5.0", "5.0", "big");
}

#[test]
fn oracle_matrix_5_0_9_nb_parents() {
    matrix("oracle_matrix_5_0_9_nb_parents", "5.0", "4.1", "big");
}

#[test]
fn oracle_matrix_5_0_4() {
    matrix("oracle_matrix_5_0_4", "5.0.4", "5.0.4", "big");
}

// BTI `da` parents (5.0's trie-indexed format), every family and operation, judged the same
// way: the children's Partitions.db and Rows.db are cleave's, the reader Cassandra's.

#[test]
fn oracle_matrix_bti_5_0_9() {
    matrix("oracle_matrix_bti_5_0_9", "5.0", "5.0", "bti");
}

#[test]
fn oracle_matrix_bti_5_0_4() {
    matrix("oracle_matrix_bti_5_0_4", "5.0.4", "5.0.4", "bti");
}

#[test]
fn oracle_matrix_4_1() {
    matrix("oracle_matrix_4_1", "4.1", "4.1", "big");
}

#[test]
fn oracle_matrix_4_0() {
    matrix("oracle_matrix_4_0", "4.0", "4.0", "big");
}

/// The oracle of `line` and a work directory, or `None` (skip printed; a failure under CI).
fn oracle_for(test: &str, line: &str) -> Option<Oracle> {
    let Some(version) = version_of(line) else {
        if common::oracle_java::strict() {
            panic!("{test}: no Cassandra {line} pinned by scripts/cassandra-testenv.sh versions");
        }
        eprintln!(
            "SKIP {test}: no Cassandra {line} installed (scripts/cassandra-testenv.sh install)"
        );
        return None;
    };
    oracle_or_skip(test, &version)
}

/// `split --parts 3` of `parent` into `<work>/<tag>/oracle/<family>` with `extra` flags.
fn split_parts(
    work: &Path,
    tag: &str,
    family: &str,
    parent: &Path,
    extra: &[&str],
) -> Vec<PathBuf> {
    let out = table_dir(&work.join(tag), family);
    let mut a = vec![
        s("split"),
        s(parent),
        s("--out"),
        s(&out),
        s("--parts"),
        s("3"),
    ];
    a.extend(extra.iter().map(s));
    a.push(s("--json"));
    run(&a).unwrap_or_else(|e| panic!("split {tag}: {e}"));
    let v = data_files(&out);
    assert_eq!(v.len(), 3, "{tag}: {v:?}");
    v
}

/// Negative control: one flipped byte inside a compressed chunk of a child, and Cassandra's
/// reader (its chunk CRC check, `CompressedChunkReader`) throws; the unharmed child reads.
#[test]
fn oracle_rejects_a_flipped_byte_in_a_chunk() {
    let test = "oracle_rejects_a_flipped_byte_in_a_chunk";
    let (Some(or), Some(wr)) = (oracle_for(test, "5.0"), oracle_for(test, "4.1")) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let o = WriteOpts {
        partitions: 600,
        ..WriteOpts::default()
    };
    let cached = wr.write_parent("uuid_plain", &o);
    let parent = copy_table(&cached, &table_dir(&work.path().join("p"), "uuid_plain"));
    let kids = split_parts(work.path(), "kids", "uuid_plain", &parent[0], &[]);
    let child = &kids[1];
    let good = or.dump(std::slice::from_ref(child));
    assert!(!good
        .rows(std::slice::from_ref(child), Pass::Index)
        .is_empty());
    let mut bytes = std::fs::read(child).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(child, &bytes).unwrap();
    let err = or
        .try_dump(std::slice::from_ref(child))
        .expect_err("Cassandra read a child with a flipped byte");
    let first = err.lines().next().unwrap_or("");
    eprintln!("flipped byte at {at} of {}: {first}", child.display());
    assert!(
        err.contains("CorruptSSTableException") || err.contains("CorruptBlockException"),
        "{err}"
    );
}

/// Negative control: a set of children missing one partition (a cleanup whose owned ranges
/// leave out exactly one token) does not match the parent's digest, and the comparison names
/// exactly that partition; the same children match the parent's rows in their owned ranges.
#[test]
fn oracle_catches_a_missing_partition() {
    let test = "oracle_catches_a_missing_partition";
    let (Some(or), Some(wr)) = (oracle_for(test, "5.0"), oracle_for(test, "4.1")) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let fam = "int_ck2desc";
    let cached = wr.write_parent(fam, &WriteOpts::default());
    let src = table_dir(&work.path().join("src"), fam);
    let parent = copy_table(&cached, &src);
    let pd = or.dump(&parent);
    let prow = pd.rows(&parent, Pass::Index);
    let victim = prow[prow.len() / 2].token;
    assert_eq!(prow.iter().filter(|p| p.token == victim).count(), 1);
    let owned = [(i64::MIN, victim - 1), (victim, i64::MAX)];
    let oy = work.path().join("owned.yaml");
    std::fs::write(
        &oy,
        owned
            .iter()
            .map(|(l, r)| format!("- {{start: \"{l}\", end: \"{r}\"}}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let out = table_dir(&work.path().join("out"), fam);
    run(&[
        s("cleanup"),
        s(&src),
        s("--owned-ranges"),
        s(&oy),
        s("--publish"),
        s("stage"),
        s("--out"),
        s(&out),
        s("--json"),
    ])
    .unwrap();
    let kids = data_files(&out);
    let d = or.dump(&kids);
    for pass in [Pass::Index, Pass::Linear] {
        let got = d.rows(&kids, pass);
        assert_ne!(
            digest(&got),
            digest(&prow),
            "{pass:?}: the digest missed it"
        );
        let missing: Vec<_> = prow.iter().filter(|p| !got.contains(p)).collect();
        assert_eq!(missing.len(), 1, "{pass:?}");
        assert_eq!(missing[0].token, victim);
        let want: Vec<_> = prow
            .iter()
            .filter(|p| in_ranges(&owned, p.token))
            .cloned()
            .collect();
        assert_eq!(got, want, "{pass:?}");
    }
}

/// Negative control, the dead-prefix hazard: children made for a 4.1 target (`--target-cassandra
/// 4.1`: the dead prefix kept) read by 5.0.9's `getScanner()` (`SSTableSimpleScanner`, from
/// Data.db position 0), while 5.0.4's and 4.1's scanners (index-driven) read them correctly.
#[test]
fn oracle_dead_prefix_child_on_5_0_9_scanner() {
    let test = "oracle_dead_prefix_child_on_5_0_9_scanner";
    let (Some(o41), Some(o504), Some(o509)) = (
        oracle_for(test, "4.1"),
        oracle_for(test, "5.0.4"),
        oracle_for(test, "5.0"),
    ) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let fam = "uuid_plain";
    // A 4.1 `nb` parent: every one of the three versions reads it.
    let cached = o41.write_parent(fam, &WriteOpts::default());
    let parent = copy_table(&cached, &table_dir(&work.path().join("p"), fam));
    let kids = split_parts(
        work.path(),
        "k41",
        fam,
        &parent[0],
        &["--target-cassandra", "4.1"],
    );
    let mut files = parent.clone();
    files.extend(kids.iter().cloned());
    for or in [&o41, &o504] {
        let d = or.dump(&files);
        let want = d.rows(&parent, Pass::Index);
        assert_eq!(d.rows(&kids, Pass::Index), want, "{} index", or.version);
        assert_eq!(d.rows(&kids, Pass::Linear), want, "{} linear", or.version);
    }
    // 5.0.9: the index pass still reads every row; the linear pass must not silently agree.
    let want = o41.dump(&parent).rows(&parent, Pass::Index);
    match o509.try_dump(&files) {
        Err(e) => {
            let first: Vec<&str> = e.lines().take(3).collect();
            eprintln!("5.0.9 getScanner() on a dead-prefix child throws: {first:?}");
        }
        Ok(d) => {
            assert_eq!(d.rows(&kids, Pass::Index), want, "5.0.9 index pass");
            let got = d.rows(&kids, Pass::Linear);
            let lost = want.iter().filter(|p| !got.contains(p)).count();
            let garbled = got.iter().filter(|p| !want.contains(p)).count();
            let empties: usize = kids
                .iter()
                .map(|k| {
                    d.of(k, Pass::Linear)
                        .partitions
                        .iter()
                        .filter(|p| p.is_empty())
                        .count()
                })
                .sum();
            eprintln!(
                "5.0.9 getScanner() on dead-prefix children: {} partitions read, {lost} lost, \
                 {garbled} not the parent's, {empties} empty; first foreign: {:?}",
                got.len(),
                got.iter().find(|p| !want.contains(p))
            );
            assert_ne!(
                got, want,
                "5.0.9's linear scanner read the dead-prefix children correctly"
            );
        }
    }
}

/// The dumper agrees with Cassandra's own sstabledump (`SSTableExport`, its linear path) on a
/// sample: the same partition keys in the same order and the same number of rows and range
/// tombstone markers in each.
#[test]
fn oracle_dump_agrees_with_sstabledump() {
    for line in ["5.0", "4.1"] {
        let Some(or) = oracle_for("oracle_dump_agrees_with_sstabledump", line) else {
            return;
        };
        for fam in ["text_int", "tomb_range", "bigint_static"] {
            let o = WriteOpts {
                partitions: 50,
                ..WriteOpts::default()
            };
            let dir = or.write_parent(fam, &o);
            let files = data_files(&dir);
            let d = or.dump(&files);
            let ours = &d.of(&files[0], Pass::Linear).partitions;
            let json = or.tool(
                "org.apache.cassandra.tools.SSTableExport",
                &[files[0].as_os_str()],
            );
            // Anything logged before the JSON array (a deprecation WARN) is not part of it.
            let start = json.find("[\n").unwrap_or(0);
            let v: serde_json::Value = serde_json::from_str(&json[start..])
                .unwrap_or_else(|e| panic!("{line} {fam}: sstabledump output: {e}: {json}"));
            let theirs = v.as_array().unwrap();
            assert_eq!(ours.len(), theirs.len(), "{line} {fam}: partitions");
            for (a, b) in ours.iter().zip(theirs) {
                let key: Vec<String> = b["partition"]["key"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k.as_str().unwrap().to_string())
                    .collect();
                assert_eq!(a.key_text, key.join(":"), "{line} {fam}");
                let rows = b["rows"].as_array().map(|r| r.len()).unwrap_or(0);
                // sstabledump lists the static row as a `static_block` among the rows.
                let ours_n = a.body.matches("Row[").count() + a.body.matches("Marker ").count();
                assert_eq!(ours_n, rows, "{line} {fam} {}: {}", a.key_text, b);
                let deleted = !b["partition"]["deletion_info"].is_null();
                assert_eq!(a.body.starts_with("DEL "), deleted, "{line} {fam}: {b}");
            }
        }
    }
}

/// sstabledump (`SSTableExport`) of BTI children prints the parent's partitions: every child of
/// `split --parts 3` and `split --tokens` (default target) of a 5.0.9 BTI parent, dumped by
/// 5.0.9's tool, holds the parent's partition keys in token order with the same number of rows
/// each; filler partitions (no row, no deletion) are the only extra ones.
#[test]
fn oracle_sstabledump_of_bti_children() {
    let Some(or) = oracle_for("oracle_sstabledump_of_bti_children", "5.0") else {
        return;
    };
    // (key, rows) of each partition sstabledump prints, fillers apart.
    let export = |data: &Path| -> (Vec<(String, usize)>, usize) {
        let json = or.tool(
            "org.apache.cassandra.tools.SSTableExport",
            &[data.as_os_str()],
        );
        let start = json.find("[\n").unwrap_or(0);
        let v: serde_json::Value = serde_json::from_str(&json[start..])
            .unwrap_or_else(|e| panic!("sstabledump {}: {e}: {json}", data.display()));
        let (mut parts, mut fillers) = (Vec::new(), 0);
        for p in v.as_array().unwrap() {
            let rows = p["rows"].as_array().map(|r| r.len()).unwrap_or(0);
            if rows == 0 && p["partition"]["deletion_info"].is_null() {
                fillers += 1;
                continue;
            }
            parts.push((p["partition"]["key"].to_string(), rows));
        }
        (parts, fillers)
    };
    for fam in ["text_int", "int_ck2desc"] {
        let o = WriteOpts {
            format: "bti",
            partitions: 60,
            ..WriteOpts::default()
        };
        let dir = or.write_parent(fam, &o);
        let parents = data_files(&dir);
        assert_eq!(parents.len(), 1);
        let (want, none) = export(&parents[0]);
        assert_eq!(none, 0, "{fam}: the parent has no empty partition");
        assert!(want.len() >= 50, "{fam}: {}", want.len());
        let work = tempfile::tempdir().unwrap();
        for (name, args) in [("parts", ["--parts", "3"]), ("tokens", ["--tokens", "0"])] {
            let out = table_dir(&work.path().join(name), fam);
            let mut a = vec![s("split"), s(&parents[0]), s("--out"), s(&out)];
            a.extend(args.iter().map(s));
            a.push(s("--json"));
            run(&a).unwrap_or_else(|e| panic!("{fam} split {name}: {e}"));
            let kids = data_files(&out);
            assert!(kids.len() >= 2, "{fam} {name}: {kids:?}");
            let (mut got, mut fillers) = (Vec::new(), 0);
            // Children in token order: by the first key's position in the parent's dump.
            let mut dumps: Vec<(Vec<(String, usize)>, usize)> =
                kids.iter().map(|k| export(k)).collect();
            dumps.sort_by_key(|(p, _)| {
                p.first()
                    .and_then(|k| want.iter().position(|w| w == k))
                    .unwrap_or(usize::MAX)
            });
            for (p, f) in dumps {
                got.extend(p);
                fillers += f;
            }
            assert_eq!(got, want, "{fam} {name}: sstabledump of the children");
            eprintln!(
                "{fam} {name}: sstabledump of {} BTI children: {} partitions as the parent's, {fillers} fillers",
                kids.len(),
                got.len()
            );
        }
    }
}

/// BTI `da` parents (5.0 only; written only: cleave splits BIG for now): Cassandra names them
/// `da-*-bti-*` and reads the same rows through the trie index and linearly.
#[test]
fn oracle_writes_bti_parents() {
    for line in ["5.0", "5.0.4"] {
        let Some(or) = oracle_for("oracle_writes_bti_parents", line) else {
            return;
        };
        let o = WriteOpts {
            format: "bti",
            ..WriteOpts::default()
        };
        let dir = or.write_parent("int_ck2desc", &o);
        let files = data_files(&dir);
        assert_eq!(files.len(), 1, "{files:?}");
        let name = files[0].file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with("da-") && name.contains("-bti-"), "{name}");
        let d = or.dump(&files);
        let idx = d.rows(&files, Pass::Index);
        assert_eq!(idx.len(), o.partitions as usize, "{line}");
        assert_eq!(idx, d.rows(&files, Pass::Linear), "{line}");
    }
}

/// Negative control for BTI children: a child's Partitions.db rebuilt with two neighbouring
/// partitions' Data.db positions swapped — a well-formed trie that points at the wrong
/// partitions — is caught by cleave's check (the key at a position must extend the trie's
/// prefix) and read differently by Cassandra 5.0.9 through its index; the unharmed child
/// reads the same rows both ways.
#[test]
fn oracle_bti_catches_a_wrong_trie() {
    use cleave::sstable::bti::{IndexPos, PartitionIndexWriter};
    use cleave::sstable::table::CheckLevel;
    let test = "oracle_bti_catches_a_wrong_trie";
    let Some(or) = oracle_for(test, "5.0") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let o = WriteOpts {
        format: "bti",
        ..WriteOpts::default()
    };
    let cached = or.write_parent("uuid_plain", &o);
    let parent = copy_table(&cached, &table_dir(&work.path().join("p"), "uuid_plain"));
    let kids = split_parts(work.path(), "kids", "uuid_plain", &parent[0], &[]);
    let child = &kids[1];
    let good = or.dump(std::slice::from_ref(child));
    let good_rows = good.rows(std::slice::from_ref(child), Pass::Index);
    assert!(good_rows.len() > 4, "{}", good_rows.len());
    assert_eq!(
        good_rows,
        good.rows(std::slice::from_ref(child), Pass::Linear)
    );

    let t = cleave::sstable::SSTable::open(child).unwrap();
    let src = t.partition_source().unwrap();
    let mut r = src.reader(&t).unwrap();
    let mut entries = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        assert!(e.row_index.is_none(), "uuid_plain has no row index");
        entries.push((e.key.to_vec(), e.position));
    }
    drop(r);
    let n = entries.len();
    let (a, b) = (n / 2, n / 2 + 1);
    let (pa, pb) = (entries[a].1, entries[b].1);
    entries[a].1 = pb;
    entries[b].1 = pa;
    let mut w = PartitionIndexWriter::new(Vec::new());
    for (k, pos) in &entries {
        w.add_key(t.partitioner, k, IndexPos::Data(*pos)).unwrap();
    }
    let bytes = w.finish(Some((&entries[0].0, &entries[n - 1].0))).unwrap();
    let partitions_db = t.path(&cleave::sstable::Component::Partitions);
    std::fs::write(&partitions_db, bytes).unwrap();

    let t = cleave::sstable::SSTable::open(child).unwrap();
    let e = t
        .check(CheckLevel::Index, &mut |_| {})
        .expect_err("cleave's check passed a trie pointing at the wrong partitions");
    // Caught as positions out of order (the trie's walk meets the later position first)
    // or, were they in order, as a key that does not extend its prefix.
    assert!(
        e.to_string().contains("positions must increase")
            || e.to_string().contains("does not match"),
        "{e}"
    );
    match or.try_dump(std::slice::from_ref(child)) {
        Err(err) => eprintln!(
            "Cassandra refused the wrong trie: {}",
            err.lines().next().unwrap_or("")
        ),
        Ok(bad) => {
            let bad_rows = bad.rows(std::slice::from_ref(child), Pass::Index);
            assert_ne!(
                bad_rows, good_rows,
                "Cassandra read the wrong trie as the right one"
            );
            eprintln!(
                "Cassandra read {} partitions through the wrong trie, {} through the right one",
                bad_rows.len(),
                good_rows.len()
            );
        }
    }
}

/// The big parent: Cassandra 5.0.9's CQLSSTableWriter writes one `blob_ck` sstable of ≥ 256 MiB
/// (LZ4, 16 KiB chunks: more than `IN_MEMORY_CHUNKS` = 8192, so cleave reads its chunk
/// offsets from CompressionInfo.db on demand, which no small parent does), cached like every
/// oracle parent. `split --parts 8` and a `--tokens` cut (default target: the dead prefixes
/// become filler partitions, the chunks stay shared) are read back by 5.0.9's reader through
/// the index and linearly from position 0, and compared by digest (`dump --digest`: counts,
/// token ranges, sum and xor of per-partition MD5s), so neither the JVM nor the test holds a
/// row. One family: the size is what is new here; the schema matrix is the small parents'.
#[test]
fn oracle_big_parent_5_0_9() {
    digest_judged(
        "oracle_big_parent_5_0_9",
        big_parent_opts("big"),
        256 << 20,
        50_000,
    );
}

/// The same ≥ 256 MiB parent written as BTI `da` (issue 33): a Cassandra-written
/// Partitions.db of many pages (60,000 keys) and Rows.db entries for its wide partitions,
/// walked by cleave and rebuilt for each child, read back by 5.0.9 through the trie and
/// linearly.
#[test]
fn oracle_big_parent_bti_5_0_9() {
    digest_judged(
        "oracle_big_parent_bti_5_0_9",
        big_parent_opts("bti"),
        256 << 20,
        50_000,
    );
}

/// BTI partitions wide enough to have a row index (up to 160 rows of 1,000 bytes: most exceed
/// the index granularity), so Cassandra writes Rows.db entries and cleave moves them into each
/// child at its own offsets; 5.0.9 reads the children through Partitions.db → Rows.db and
/// linearly. The small matrix's and the big parent's partitions are all below the threshold
/// (their Rows.db is empty).
#[test]
fn oracle_bti_row_index_5_0_9() {
    let o = WriteOpts {
        partitions: 300,
        rows: 160,
        ..big_parent_opts("bti")
    };
    digest_judged("oracle_bti_row_index_5_0_9", o, 8 << 20, 290);
}

fn big_parent_opts(format: &'static str) -> WriteOpts {
    WriteOpts {
        format,
        partitions: 60_000,
        rows: 8,
        value_bytes: 1000,
        seed: 256,
        compression: "lz4",
        chunk_kb: 16,
        sorted: true,
    }
}

/// One `blob_ck` parent written by 5.0.9 with `o`, of at least `min_bytes` and more than
/// `min_partitions`, cut twice and judged by digest (see `oracle_big_parent_5_0_9`).
fn digest_judged(test: &str, o: WriteOpts, min_bytes: u64, min_partitions: u64) {
    let Some(or) = oracle_for(test, "5.0") else {
        return;
    };
    let fam = "blob_ck";
    let format = o.format;
    let t0 = std::time::Instant::now();
    let cached = or.write_parent(fam, &o);
    let wrote = t0.elapsed();
    let work = tempfile::tempdir().unwrap();
    let pdir = table_dir(&work.path().join("p"), fam);
    let mut parent = None;
    for e in std::fs::read_dir(&cached).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().into_string().unwrap();
        // std::fs::copy: copy_file_range, never the whole file in our memory.
        std::fs::copy(e.path(), pdir.join(&n)).unwrap();
        if n.ends_with("-Data.db") {
            assert!(parent.is_none(), "{fam}: one parent sstable");
            parent = Some(pdir.join(&n));
        }
    }
    let parent = parent.unwrap();
    let size = std::fs::metadata(&parent).unwrap().len();
    assert!(size >= min_bytes, "the parent is {size} bytes");
    if o.rows > 100 {
        let rows = std::fs::metadata(sibling(&parent, "Rows.db"))
            .unwrap()
            .len();
        assert!(rows > 0, "{test}: Cassandra wrote no row index");
    }

    let t1 = std::time::Instant::now();
    let pd = or.dump_digest(std::slice::from_ref(&parent));
    let summary = |pass: Pass| {
        pd.iter()
            .find(|(p, f, _)| *p == pass && f == &parent)
            .map(|x| x.2)
            .unwrap()
    };
    let whole = summary(Pass::Index);
    assert_eq!(whole, summary(Pass::Linear), "the parent's passes differ");
    assert!(
        whole.count > min_partitions && whole.empty == 0,
        "{whole:?}"
    );
    let read_parent = t1.elapsed();

    // Cuts: --parts 8, and --tokens at a third and two thirds of the parent's token span.
    let span = whole.max as i128 - whole.min as i128;
    let c1 = (whole.min as i128 + span / 3) as i64;
    let c2 = (whole.min as i128 + 2 * span / 3) as i64;
    let toks = format!("{c1},{c2}");
    let mut cases: Vec<(&str, Vec<PathBuf>, Vec<i64>)> = Vec::new();
    let t2 = std::time::Instant::now();
    let mut moved = Vec::new();
    for (name, args, cuts) in [
        ("parts", vec!["--parts", "8"], vec![]),
        ("tokens", vec!["--tokens", toks.as_str()], vec![c1, c2]),
    ] {
        let out = table_dir(&work.path().join(name), fam);
        let mut a = vec![s("split"), s(&parent), s("--out"), s(&out)];
        a.extend(args.iter().map(s));
        a.push(s("--json"));
        let j = run(&a).unwrap_or_else(|e| panic!("split {name}: {e}"));
        moved.push(format!(
            "{name}: shared {} copied {} re-encoded {}",
            j["bytes_shared"], j["bytes_copied"], j["bytes_reencoded"]
        ));
        let kids = data_files(&out);
        assert_eq!(kids.len(), if cuts.is_empty() { 8 } else { 3 }, "{name}");
        cases.push((name, kids, cuts));
    }
    let split = t2.elapsed();

    let t3 = std::time::Instant::now();
    let files: Vec<PathBuf> = cases.iter().flat_map(|c| c.1.iter().cloned()).collect();
    let d = or.dump_digest(&files);
    let read_children = t3.elapsed();
    let mut fillers = 0;
    for (name, kids, cuts) in &cases {
        for pass in [Pass::Index, Pass::Linear] {
            let mut per: Vec<Summary> = kids
                .iter()
                .map(|k| {
                    d.iter()
                        .find(|(p, f, _)| *p == pass && f == k)
                        .map(|x| x.2)
                        .unwrap_or_else(|| panic!("no {pass:?} summary of {}", k.display()))
                })
                .collect();
            fillers += per.iter().map(|x| x.empty).sum::<u64>();
            let total = per.iter().fold(
                Summary {
                    min: i64::MAX,
                    max: i64::MIN,
                    ..Summary::default()
                },
                |a, b| a.add(*b),
            );
            assert_eq!(
                (total.count, total.min, total.max, total.sum, total.xor),
                (whole.count, whole.min, whole.max, whole.sum, whole.xor),
                "{name} {pass:?}: Cassandra reads other rows in the children than in the parent"
            );
            // Disjoint token ranges, each child within its cut.
            per.retain(|x| x.count > 0);
            per.sort_by_key(|x| x.min);
            for w in per.windows(2) {
                assert!(w[0].max < w[1].min, "{name} {pass:?}: overlapping children");
            }
            if !cuts.is_empty() {
                assert_eq!(per.len(), 3, "{name} {pass:?}");
                assert!(
                    per[0].max <= cuts[0] && cuts[0] < per[1].min,
                    "{name} {pass:?}"
                );
                assert!(
                    per[1].max <= cuts[1] && cuts[1] < per[2].min,
                    "{name} {pass:?}"
                );
            }
        }
    }
    eprintln!(
        "{format} parent {} ({size} bytes, {} partitions, written in {wrote:?} (cached: {})): \
         Cassandra {} read it in {read_parent:?}, cleave split it twice in {split:?} ({moved:?}), \
         Cassandra read the {} children in {read_children:?} ({fillers} filler partitions seen); \
         index and linear digests equal the parent's",
        parent.display(),
        whole.count,
        wrote.as_secs() < 2,
        or.version,
        files.len(),
    );
}

/// Issue 32: the families whose children get a row filler under the default target
/// (`sstable::filler::row_filler`): fixed-width keys (`int`, `bigint`, `uuid`, `timeuuid`,
/// `timestamp`, `(int, uuid)`) and static columns (`bigint_static`, `(int, bigint)` with a
/// static column).
const ROW_FILLER_FAMILIES: [&str; 7] = [
    "int_ck2desc",
    "bigint_static",
    "uuid_plain",
    "timeuuid_ck",
    "ts_plain",
    "int_uuid",
    "int_bigint",
];

/// Children of Cassandra-written LZ4 parents of every row-filler family, default target:
/// no child is `regrid` (no `dead_prefix_*` fallback), every child but the first starts with
/// a filler Cassandra reads as an empty partition, and both of Cassandra's passes equal the
/// parent's rows. Prints how much of the children's Data.db is whole parent chunks.
fn row_fillers(test: &str, line: &str) {
    let Some(or) = oracle_for(test, line) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let mut cases = Vec::new();
    let mut files = Vec::new();
    let mut table = Vec::new();
    for (i, f) in ROW_FILLER_FAMILIES.iter().enumerate() {
        for chunk_kb in [4u32, 16] {
            let o = WriteOpts {
                partitions: 600,
                compression: "lz4",
                chunk_kb,
                seed: 320 + i as u64,
                ..WriteOpts::default()
            };
            let cached = or.write_parent(f, &o);
            let tag = format!("{f}-{chunk_kb}k");
            let parent = copy_table(&cached, &table_dir(&work.path().join(&tag), f))[0].clone();
            let out = table_dir(&work.path().join(format!("{tag}-parts")), f);
            let r = run(&[
                s("split"),
                s(&parent),
                s("--out"),
                s(&out),
                s("--parts"),
                s("4"),
                s("--json"),
            ])
            .unwrap_or_else(|e| panic!("{tag}: {e}"));
            let kids = r["children"].as_array().cloned().unwrap_or_default();
            assert_eq!(kids.len(), 4, "{tag}: {r}");
            let (mut whole, mut reenc) = (0u64, 0u64);
            for k in &kids {
                assert_ne!(k["layout"], "regrid", "{tag}: a child was regrid: {k}");
                let reason = k["fallback"]["reason"].as_str().unwrap_or("");
                assert!(!reason.starts_with("dead_prefix"), "{tag}: {k}");
                whole += k["bytes_shared"].as_u64().unwrap_or(0)
                    + k["bytes_copied"].as_u64().unwrap_or(0);
                reenc += k["bytes_reencoded"].as_u64().unwrap_or(0);
            }
            table.push(format!(
                "{tag}: {:.1}% of {} children bytes whole parent chunks",
                100.0 * whole as f64 / (whole + reenc).max(1) as f64,
                whole + reenc
            ));
            let children = data_files(&out);
            files.push(parent.clone());
            files.extend(children.iter().cloned());
            cases.push(Case {
                name: format!("{tag} split --parts 4 (default target)"),
                parent,
                children,
                ranges: vec![],
                repaired: None,
            });
        }
    }
    let d = or.dump(&files);
    for c in &cases {
        let fillers = judge(&d, c);
        // Three of four children start inside a chunk; each gets one filler, seen by both passes.
        assert!(fillers >= 2, "{}: {fillers} filler partitions seen", c.name);
    }
    eprintln!(
        "ROW FILLERS on {}: {} cases passed; {}",
        or.version,
        cases.len(),
        table.join("; ")
    );
}

#[test]
fn oracle_row_fillers_5_0_9() {
    row_fillers("oracle_row_fillers_5_0_9", "5.0");
}

#[test]
fn oracle_row_fillers_5_0_4() {
    row_fillers("oracle_row_fillers_5_0_4", "5.0.4");
}

#[test]
fn oracle_row_fillers_4_1() {
    row_fillers("oracle_row_fillers_4_1", "4.1");
}

#[test]
fn oracle_row_fillers_4_0() {
    row_fillers("oracle_row_fillers_4_0", "4.0");
}

/// Negative control for the row filler: a child whose filler is rebuilt one byte short (its
/// key and Index.db unchanged, a stray zero byte before the first real partition) is caught by
/// Cassandra's linear pass, while the same child as cleave wrote it reads equal to the parent.
/// An uncompressed parent, so the test can rewrite Data.db in place.
#[test]
fn oracle_catches_a_row_filler_one_byte_short() {
    use cleave::sstable::filler::{row_filler, RowShape};
    let test = "oracle_catches_a_row_filler_one_byte_short";
    let Some(or) = oracle_for(test, "5.0") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let f = "int_ck2desc";
    let o = WriteOpts {
        partitions: 600,
        compression: "none",
        seed: 321,
        ..WriteOpts::default()
    };
    let cached = or.write_parent(f, &o);
    let parent = copy_table(&cached, &table_dir(&work.path().join("p"), f))[0].clone();
    let good = split_parts(work.path(), "good", f, &parent, &[]);
    let bad = split_parts(work.path(), "bad", f, &parent, &[]);
    // The first child with a filler in front of its first partition.
    let mut victim = None;
    for (g, b) in good.iter().zip(&bad) {
        let t = cleave::sstable::SSTable::open(b).unwrap();
        let h = t.statistics.header.clone().unwrap();
        let shape = RowShape {
            clustering: h.clustering_types.len(),
            statics: h.static_columns.len(),
            regular: h.regular_columns.len(),
        };
        let mut r = t.index_reader().unwrap();
        let first = r
            .next_entry()
            .unwrap()
            .map(|e| (e.key.to_vec(), e.position));
        let second = r.next_entry().unwrap().map(|e| e.position);
        if let (Some((key, 0)), Some(d)) = (first, second) {
            let mut data = std::fs::read(b).unwrap();
            let Some(f1) = row_filler(t.descriptor.version, &shape, &key, d as usize) else {
                continue;
            };
            if data[..d as usize] != f1.bytes[..] {
                continue; // not a row filler
            }
            let short = row_filler(t.descriptor.version, &shape, &key, d as usize - 1)
                .expect("a filler one byte short");
            data[..d as usize - 1].copy_from_slice(&short.bytes);
            data[d as usize - 1] = 0;
            std::fs::write(b, &data).unwrap();
            victim = Some((g.clone(), b.clone()));
            break;
        }
    }
    let (g, b) = victim.expect("a child with a row filler");
    let d = or.dump(std::slice::from_ref(&parent));
    let want: Vec<_> = d.rows(std::slice::from_ref(&parent), Pass::Index);
    let ok = or.dump(std::slice::from_ref(&g));
    assert!(
        !ok.rows(std::slice::from_ref(&g), Pass::Linear).is_empty(),
        "the good child reads rows"
    );
    for p in ok.rows(std::slice::from_ref(&g), Pass::Linear) {
        assert!(want.contains(&p), "the good child reads {p:?}");
    }
    match or.try_dump(std::slice::from_ref(&b)) {
        Err(e) => eprintln!(
            "NEGATIVE row filler one byte short: Cassandra refused: {}",
            e.lines().last().unwrap_or("")
        ),
        Ok(bd) => {
            let lin = bd.rows(std::slice::from_ref(&b), Pass::Linear);
            let idx = bd.rows(std::slice::from_ref(&b), Pass::Index);
            assert!(
                lin != idx || lin.iter().any(|p| !want.contains(p)),
                "a filler one byte short went unnoticed"
            );
            eprintln!(
                "NEGATIVE row filler one byte short: the linear pass differs ({} partitions vs {})",
                lin.len(),
                idx.len()
            );
        }
    }
}

/// A trie-only BTI split (`--bti-keys trie`, the default: Partitions.db's prefixes, Data.db
/// read only at the cuts) writes the very children a key-reading one (`--bti-keys data`)
/// writes — every file but Filter.db byte for byte, Partitions.db included — for every
/// family's Cassandra-written parent, by `--parts`, `--tokens`, anticompaction and cleanup
/// (token cuts placed on real tokens, where a prefix cannot place its key). Filter.db is the
/// parent's (plus the child's fillers), which holds every key of the child. The matrices
/// judge trie-only children by Cassandra; this ties them to the key-reading path.
#[test]
fn oracle_bti_trie_only_children_equal_the_key_reading_ones() {
    let test = "oracle_bti_trie_only_children_equal_the_key_reading_ones";
    let Some(wr) = oracle_for(test, "5.0") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let mut parents: Vec<(String, WriteOpts)> = FAMILIES
        .iter()
        .enumerate()
        .map(|(i, f)| {
            (
                f.to_string(),
                WriteOpts {
                    format: "bti",
                    ..write_opts(i)
                },
            )
        })
        .collect();
    // Partitions with a Rows.db row index.
    parents.push((
        "blob_ck".into(),
        WriteOpts {
            partitions: 300,
            rows: 160,
            ..big_parent_opts("bti")
        },
    ));
    let mut compared = 0;
    let mut with_fillers = 0;
    for (n, (f, o)) in parents.iter().enumerate() {
        let cached = wr.write_parent(f, o);
        let src = table_dir(&work.path().join(format!("p{n}")), f);
        let files = copy_table(&cached, &src);
        let parent = &files[0];
        let t = cleave::sstable::SSTable::open(parent).unwrap();
        let mut tokens = Vec::new();
        let ps = t.partition_source().unwrap();
        let mut r = ps.reader(&t).unwrap();
        while let Some(e) = r.next_entry().unwrap() {
            if let cleave::sstable::token::Token::Murmur3(v) = t.partitioner.token(e.key) {
                tokens.push(v);
            }
        }
        let q = |x: f64| tok(&tokens, x);
        let owned = work.path().join(format!("owned{n}.yaml"));
        std::fs::write(
            &owned,
            format!(
                "- {{start: \"{}\", end: \"{}\"}}\n- {{start: \"{}\", end: \"{}\"}}\n",
                q(0.1),
                q(0.35),
                q(0.65),
                q(0.9)
            ),
        )
        .unwrap();
        let anti = work.path().join(format!("anti{n}.yaml"));
        std::fs::write(
            &anti,
            format!("- {{start: \"{}\", end: \"{}\"}}\n", q(0.35), q(0.65)),
        )
        .unwrap();
        let toks = format!("{},{},{}", q(0.2), q(0.5), q(0.8));
        let ops: Vec<(&str, Vec<String>)> = vec![
            ("parts", vec!["--parts".into(), "4".into()]),
            ("tokens", vec!["--tokens".into(), toks]),
            (
                "anti",
                vec![
                    "--ranges".into(),
                    anti.display().to_string(),
                    "--repaired-at".into(),
                    "1700000000123".into(),
                ],
            ),
            ("cleanup", vec![]),
        ];
        for (op, args) in ops {
            let mut kids = Vec::new();
            for keys in ["trie", "data"] {
                let out = table_dir(&work.path().join(format!("{n}-{op}-{keys}")), f);
                let mut a: Vec<String> = if op == "cleanup" {
                    let s = table_dir(&work.path().join(format!("{n}-{op}-{keys}-src")), f);
                    copy_table(&src, &s);
                    vec![
                        "cleanup".into(),
                        s.display().to_string(),
                        "--owned-ranges".into(),
                        owned.display().to_string(),
                        "--publish".into(),
                        "stage".into(),
                    ]
                } else {
                    let mut v = vec!["split".into(), parent.display().to_string()];
                    v.extend(args.iter().cloned());
                    v
                };
                a.extend([
                    "--out".into(),
                    out.display().to_string(),
                    "--bti-keys".into(),
                    keys.into(),
                    "--json".into(),
                ]);
                let a: Vec<&std::ffi::OsStr> = a.iter().map(|x| s(x.as_str())).collect();
                run(&a).unwrap_or_else(|e| panic!("{f} {op} --bti-keys {keys}: {e}"));
                kids.push(out);
            }
            let names = |d: &Path| -> Vec<String> {
                let mut v: Vec<String> = std::fs::read_dir(d)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                    .collect();
                v.sort();
                v
            };
            let (trie, data) = (&kids[0], &kids[1]);
            assert_eq!(names(trie), names(data), "{f} {op}");
            assert!(!names(trie).is_empty(), "{f} {op}: no child");
            for name in names(trie) {
                let a = std::fs::read(trie.join(&name)).unwrap();
                let b = std::fs::read(data.join(&name)).unwrap();
                if name.ends_with("-Filter.db") {
                    let data_db = name.replace("-Filter.db", "-Data.db");
                    let child = cleave::sstable::SSTable::open(&trie.join(data_db)).unwrap();
                    let rep = child
                        .check(cleave::sstable::table::CheckLevel::Full, &mut |_| {})
                        .unwrap_or_else(|e| panic!("{f} {op} {name}: {e}"));
                    if rep.empty_partitions == 0 {
                        assert_eq!(a, std::fs::read(sibling(parent, "Filter.db")).unwrap());
                    } else {
                        with_fillers += 1;
                    }
                } else {
                    assert!(
                        a == b,
                        "{f} {op}: {name} differs between --bti-keys trie and data"
                    );
                    compared += 1;
                }
            }
        }
    }
    eprintln!("{test}: {compared} files equal, {with_fillers} children with fillers");
    assert!(with_fillers > 0, "some child starts with fillers");
}

/// Negative controls of the trie-only check (`split::trie_only::check_child`), which reads no
/// key but each child's first and last: a child whose Partitions.db lost one entry, and one
/// whose entry points at a neighbouring partition, are refused (`CheckFailed`) before
/// anything is published; the undamaged write passes.
#[test]
fn oracle_bti_trie_only_check_catches_a_wrong_child_trie() {
    use cleave::reason::Reason;
    use cleave::split::parent::Parent;
    use cleave::split::plan::{PlanSource, Policy};
    use cleave::split::spec::Cut;
    use cleave::sstable::bti::{IndexPos, PartitionIndex, PartitionIndexWriter};
    use cleave::sstable::Component;
    let test = "oracle_bti_trie_only_check_catches_a_wrong_child_trie";
    let Some(wr) = oracle_for(test, "5.0") else {
        return;
    };
    let f = FAMILIES[0];
    let o = WriteOpts {
        format: "bti",
        ..write_opts(0)
    };
    let work = tempfile::tempdir().unwrap();
    let cached = wr.write_parent(f, &o);
    let files = copy_table(&cached, &table_dir(&work.path().join("p"), f));
    let p = Parent::open(&files[0]).unwrap();
    let plan = p.plan(&Cut::Parts(3), &Policy::default()).unwrap();
    assert_eq!(plan.source, PlanSource::PartitionsTrie);
    // damage: 0 none; the middle entry (a partition of the parent's, not a filler) 1
    // dropped, 2 with another hash byte, 3 one byte further into its partition (the trie
    // stays well-formed, positions increasing).
    for damage in 0..4 {
        let out = work.path().join(format!("out{damage}"));
        std::fs::create_dir(&out).unwrap();
        let staged = plan.write(&out).unwrap();
        let path = staged.descriptors()[1].path(&Component::Partitions);
        let bytes = std::fs::read(&path).unwrap();
        let index = PartitionIndex::parse(&path, &bytes).unwrap();
        let entries: Vec<_> = index.entries().map(|e| e.unwrap()).collect();
        assert!(entries.len() > 3);
        let mid = entries.len() / 2;
        if damage > 0 {
            let mut w = PartitionIndexWriter::new(Vec::new());
            for (i, e) in entries.iter().enumerate() {
                let hash = e.hash.unwrap();
                match (damage, i == mid, e.pos) {
                    (1, true, _) => {}
                    (2, true, pos) => w.add(&e.prefix, hash ^ 1, pos).unwrap(),
                    (3, true, IndexPos::Data(p)) => {
                        w.add(&e.prefix, hash, IndexPos::Data(p + 1)).unwrap()
                    }
                    (_, _, pos) => w.add(&e.prefix, hash, pos).unwrap(),
                }
            }
            let footer = index.footer();
            let b = w
                .finish(Some((&footer.first_key, &footer.last_key)))
                .unwrap();
            std::fs::write(&path, b).unwrap();
        }
        match staged.check() {
            Ok(_) => assert_eq!(damage, 0, "damage {damage} passed the check"),
            Err(e) => {
                assert_ne!(damage, 0, "the undamaged children fail: {e}");
                assert_eq!(e.reason(), Reason::CheckFailed, "{e}");
            }
        }
    }
}

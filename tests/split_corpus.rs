//! The split engine on every real SSTable of the corpus with at least two partitions:
//! `--parts 2..4` and token boundaries at partition tokens. Every child passes the
//! independent `sstcheck.py`; children's key sets are disjoint, in token order, and add up
//! to the parent's; for `na`/`nb`/`oa`, cqlite reads from the children exactly the rows it
//! reads from the parent.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::Path;

use cleave::split::plan::Layout;
use cleave::split::publish::Publish;
use cleave::split::spec::Cut;
use cleave::split::{run_path, DigestPolicy, Policy, SplitReport, Target};
use cleave::sstable::cassandra::TargetCassandra;
use cleave::sstable::{SSTable, Token};
use common::index_keys as keys;
use common::*;

fn split(
    parent: &Path,
    cut: &Cut,
    out: &Path,
    layout: Option<Layout>,
    target: TargetCassandra,
) -> Result<SplitReport, cleave::split::SplitError> {
    let policy = Policy {
        layout,
        digest: DigestPolicy::Combine,
        target,
        ..Policy::default()
    };
    let target = Target {
        out_dir: out.to_path_buf(),
        publish: Publish::Stage,
        dry_run: false,
    };
    run_path(parent, cut, &policy, &target, &mut |_| {})
}

fn tokens(data: &Path) -> Vec<Token> {
    let t = SSTable::open(data).unwrap();
    let mut r = t.index_reader().unwrap();
    let mut v = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        v.push(t.partitioner.token(e.key));
    }
    v
}

/// sstcheck passes on every child; children's keys concatenated in order equal the parent's
/// (leading filler partitions, which sstcheck counts apart as `empty_partitions`, left out);
/// for a target that scans Data.db from 0, every child's first partition is at 0.
fn assert_children_valid(
    shared: &Path,
    parent_keys: &[String],
    report: &SplitReport,
    what: &str,
    target: TargetCassandra,
) {
    let sstcheck = shared.join("tools/sstcheck.py");
    // One sstcheck process for all children: it prints one JSON object per sstable.
    let mut args: Vec<&std::ffi::OsStr> = vec![sstcheck.as_os_str()];
    args.extend(report.children.iter().map(|c| c.path.as_os_str()));
    let out = std::process::Command::new("python3")
        .args(&args)
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        report.children.len(),
        "{what}: sstcheck output: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut all = Vec::new();
    for (c, out) in report.children.iter().zip(&lines) {
        assert_eq!(
            out["ok"].as_bool(),
            Some(true),
            "{what}: sstcheck rejects {}: {}",
            c.path.display(),
            out["errors"]
        );
        let empties = out["empty_partitions"].as_u64().unwrap_or(0);
        // sstcheck.py counts only `LIVE | 0x01` as empty: a row filler (fixed-width keys,
        // static columns; `filler::row_filler`) is one more partition to it.
        let row_fillers = c.filler_partitions.saturating_sub(empties);
        assert!(
            empties == c.filler_partitions || (empties == 0 && row_fillers == 1),
            "{what}: fillers: sstcheck {empties}, report {}",
            c.filler_partitions
        );
        assert_eq!(
            out["partitions"].as_u64(),
            Some(c.partitions + row_fillers),
            "{what}"
        );
        let empties = c.filler_partitions;
        if target.scans_data_from_zero() {
            assert_eq!(
                out["first_position"].as_u64(),
                Some(0),
                "{what}: {} starts with a dead prefix for Cassandra {target}: {:?}",
                c.path.display(),
                c.fallback
            );
        }
        let ks = keys(&c.path);
        assert!(ks.len() as u64 > empties, "{what}: empty child");
        all.extend(ks.into_iter().skip(empties as usize));
        // The independent full check too.
        let t = SSTable::open(&c.path).unwrap();
        t.check(cleave::sstable::table::CheckLevel::Full, &mut |_| {})
            .unwrap_or_else(|e| panic!("{what}: {}: {e}", c.path.display()));
    }
    assert_eq!(
        all, parent_keys,
        "{what}: children's keys, in order, must be the parent's"
    );
    let check = report
        .check
        .as_ref()
        .expect("a split that wrote reports its check");
    assert!(check.ok);
    assert_eq!(check.parent, check.children);
}

fn cqlite_rows(r: &ManifestRow, data: &[&Path]) -> Option<Vec<serde_json::Value>> {
    let schema = r.schema_file.as_ref()?;
    let (ks, table) = r.table.split_once('/')?;
    Some(cqlite_dump_rows(schema, ks, table, data))
}

/// The cuts a test runs on every sstable, and the layouts for each.
#[derive(Clone, Copy)]
enum Cuts {
    Parts(usize),
    TokensAtPartitions,
}

fn run_corpus(cuts: Cuts, layouts: &[Option<Layout>]) {
    run_corpus_for(cuts, layouts, TargetCassandra::Unknown)
}

fn run_corpus_for(cuts: Cuts, layouts: &[Option<Layout>], target: TargetCassandra) {
    let Some(shared) = corpus_or_skip("split corpus") else {
        return;
    };
    let cqlite = cqlite_available();
    if !cqlite {
        eprintln!("SKIP cqlite comparison: python package cqlite-py is not installed");
    }
    let mut splits = 0;
    let mut cqlite_compared = 0;
    // (version, key family) -> children (filled, regrid for the target, neither).
    let mut filled: std::collections::BTreeMap<(String, &'static str), (u64, u64, u64)> =
        Default::default();
    for r in manifest(&shared)
        .into_iter()
        .filter(|r| is_supported_big(r) && !is_damaged(r) && r.partitions >= 2)
    {
        let work = tempfile::tempdir().unwrap();
        let parent = copy_sstable(&r.data_db, work.path());
        let pkeys = keys(&parent);
        let ptokens = tokens(&parent);
        let parent_rows = if cqlite && ["na", "nb", "oa"].contains(&r.version.as_str()) {
            cqlite_rows(&r, &[&parent])
        } else {
            None
        };
        let (what, cut) = match cuts {
            Cuts::Parts(n) => (format!("parts {n}"), Cut::Parts(n)),
            Cuts::TokensAtPartitions => {
                // Boundaries at partition tokens: after the first, and after every other one.
                let mut b = vec![ptokens[0].clone()];
                b.extend(
                    ptokens
                        .iter()
                        .skip(2)
                        .step_by(2)
                        .filter(|t| **t != ptokens[0])
                        .cloned(),
                );
                b.dedup();
                ("tokens at partitions".to_string(), Cut::Tokens(b))
            }
        };
        for layout in layouts {
            let out = tempfile::tempdir_in(work.path()).unwrap();
            let label = format!("{} {what} {layout:?}", r.data_db.display());
            let rep = split(&parent, &cut, out.path(), *layout, target)
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            if let Cuts::Parts(n) = cuts {
                // --parts N means min(N, partitions) children, one-chunk tables included.
                assert_eq!(
                    rep.children.len() as u64,
                    (n as u64).min(r.partitions),
                    "{label}: children"
                );
            }
            assert_children_valid(&shared, &pkeys, &rep, &label, target);
            for c in &rep.children {
                let e = filled
                    .entry((r.version.clone(), key_family(&parent)))
                    .or_insert((0, 0, 0));
                match (&c.fallback, c.filler_partitions) {
                    (Some(f @ cleave::split::fallback::Fallback::DeadPrefix { .. }), _) => {
                        eprintln!("  {label}: {f}");
                        e.1 += 1
                    }
                    (_, n) if n > 0 => e.0 += 1,
                    _ => e.2 += 1,
                }
            }
            // cqlite 0.17 misreads a row filler's empty rows (it takes them for a row
            // deletion running past the row's size), where every Cassandra reads them as
            // empty (`oracle_offline::oracle_row_fillers_*`): those children are judged by
            // Cassandra, sstcheck and cleave's check only.
            let row_filled = rep.children.iter().any(|c| {
                c.filler_partitions > 0
                    && SSTable::open(&c.path).is_ok_and(|t| {
                        t.statistics.header.as_ref().is_some_and(|h| {
                            !h.static_columns.is_empty()
                                || matches!(
                                    cleave::sstable::filler::key_shape(&h.key_type),
                                    cleave::sstable::filler::KeyShape::Fixed(_)
                                )
                        })
                    })
            });
            if let (Some(pr), false) = (&parent_rows, row_filled) {
                let paths: Vec<&Path> = rep.children.iter().map(|c| c.path.as_path()).collect();
                let cr = cqlite_rows(&r, &paths).unwrap();
                assert_eq!(
                    &cr, pr,
                    "{label}: cqlite rows from the children differ from the parent's"
                );
                cqlite_compared += 1;
            }
            if *layout == Some(Layout::Regrid) {
                for c in &rep.children {
                    assert_eq!(c.layout, Layout::Regrid);
                    let t = SSTable::open(&c.path).unwrap();
                    let mut ir = t.index_reader().unwrap();
                    assert_eq!(
                        ir.next_entry().unwrap().unwrap().position,
                        0,
                        "regrid has no dead prefix"
                    );
                }
            }
            splits += 1;
        }
        // The parent is untouched.
        assert_eq!(keys(&parent), pkeys);
    }
    eprintln!("{splits} splits checked, {cqlite_compared} compared with cqlite, target {target}");
    for ((v, fam), (f, g, n)) in &filled {
        eprintln!(
            "  {v} {fam}: {f} children filled, {g} regrid (dead prefix refused), {n} neither"
        );
    }
    if target.scans_data_from_zero() && layouts.contains(&None) {
        // Every BIG version with a variable-length key gets fillers, and some fixed-width
        // keys are refused with DeadPrefix.
        for v in ["ma", "mb", "mc", "md", "me", "na", "nb", "oa"] {
            let any = filled
                .iter()
                .any(|((vv, fam), (f, _, _))| vv == v && *fam != "fixed" && *f > 0);
            let present = filled.keys().any(|(vv, fam)| vv == v && *fam != "fixed");
            assert!(
                !present || any,
                "{v}: no child with a variable-length key was filled: {filled:?}"
            );
        }
    } else if !target.scans_data_from_zero() {
        assert!(
            filled.values().all(|(f, g, _)| *f == 0 && *g == 0),
            "{filled:?}"
        );
    }
    assert!(splits >= 70 * layouts.len(), "only {splits} splits");
    if cqlite {
        assert!(
            cqlite_compared >= 16 * layouts.len(),
            "only {cqlite_compared} cqlite comparisons"
        );
    }
}

#[test]
fn corpus_split_in_2_parts() {
    run_corpus(Cuts::Parts(2), &[None]);
}

/// For Cassandra 4.1 nothing changes: dead prefixes stay zeros, no filler, no regrid.
#[test]
fn corpus_split_in_2_parts_for_cassandra_4_1() {
    let t = TargetCassandra::parse("4.1").unwrap();
    run_corpus_for(Cuts::Parts(2), &[None], t);
}

/// The partition key type's family, from the SerializationHeader.
fn key_family(data: &Path) -> &'static str {
    use cleave::sstable::filler::{key_shape, KeyShape};
    let t = SSTable::open(data).unwrap();
    match t.statistics.header.as_ref().map(|h| key_shape(&h.key_type)) {
        Some(KeyShape::Free | KeyShape::Blob) => "variable",
        Some(KeyShape::Composite(_)) => "composite",
        Some(KeyShape::Fixed(_)) => "fixed",
        Some(KeyShape::Unsupported(_)) => "other",
        None => "no header",
    }
}

#[test]
fn corpus_split_in_3_parts_every_layout() {
    run_corpus(
        Cuts::Parts(3),
        &[None, Some(Layout::Copy), Some(Layout::Regrid)],
    );
}

#[test]
fn corpus_split_in_4_parts() {
    run_corpus(Cuts::Parts(4), &[None, Some(Layout::Regrid)]);
}

#[test]
fn corpus_split_at_partition_tokens_every_layout() {
    run_corpus(
        Cuts::TokensAtPartitions,
        &[None, Some(Layout::Copy), Some(Layout::Regrid)],
    );
}

/// The sampled plan (Summary.db + point reads) equals the full index pass's on every real
/// sstable of the corpus, for --parts 2..=5, token boundaries and vnode-like ranges; and
/// most real summaries are usable (full sampling), so the sampled path is what runs.
#[test]
fn corpus_sampled_plans_equal_the_index_pass() {
    use cleave::split::plan::PlanSource;
    use cleave::split::spec::{RepairSession, RepairedRanges};
    use cleave::split::Parent;
    use cleave::sstable::TokenRange;
    let Some(shared) = corpus_or_skip("sampled plans") else {
        return;
    };
    let (mut sampled, mut fallback) = (0, 0);
    for r in manifest(&shared)
        .into_iter()
        .filter(|r| is_supported_big(r) && !is_damaged(r) && r.partitions >= 1)
    {
        let Ok(parent) = Parent::open(&r.data_db) else {
            continue;
        };
        let ptokens = tokens(&r.data_db);
        let mut cuts: Vec<Cut> = (2..=5).map(Cut::Parts).collect();
        let mut b: Vec<Token> = ptokens.iter().step_by(3).cloned().collect();
        b.dedup();
        cuts.push(Cut::Tokens(b.clone()));
        if b.len() >= 2 {
            cuts.push(Cut::Ranges(RepairedRanges {
                full: b
                    .windows(2)
                    .step_by(2)
                    .map(|w| TokenRange::new(w[0].clone(), w[1].clone()))
                    .collect(),
                transient: Vec::new(),
                session: RepairSession::RepairedAt(1),
            }));
        }
        for cut in &cuts {
            let policy = Policy::default();
            let a = parent.plan(cut, &policy).unwrap();
            let full = parent.plan_index_pass(cut, &policy).unwrap();
            assert_eq!(full.source, PlanSource::IndexPass);
            assert_eq!(a.partitions, r.partitions, "{}", r.data_db.display());
            assert_eq!(
                a.children,
                full.children,
                "{} {cut:?}: the sampled plan differs",
                r.data_db.display()
            );
            match a.source {
                PlanSource::SummarySamples => sampled += 1,
                // The corpus's BTI fixtures are ByteOrdered: no trie-only plan here.
                PlanSource::IndexPass | PlanSource::PartitionsTrie => fallback += 1,
            }
        }
    }
    eprintln!("{sampled} plans from Summary.db samples, {fallback} from the index pass");
    assert!(
        sampled > 100,
        "only {sampled} sampled plans ({fallback} fell back)"
    );
}

//! Incompressible data and the `aligned` layout: 1,000 random token cuts of a `gen
//! --random` parent on a real XFS (block 4096), each child's Data.db decided
//! (`Plan::data_layout`, no write): at most 1 in 64 children that have an interior to share
//! may fall back. The knobs: a first chunk without a dead prefix on a block boundary is
//! carried verbatim; a dead prefix shorter than a block gets a lead chunk of zeros whose
//! LZ4 encoding aligns the interior (split::plan::needs_lead).
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use cleave::split::plan::Layout;
use cleave::split::{Cut, Parent, Policy};
use cleave::sstable::Token;
use common::*;

#[test]
fn random_cuts_of_incompressible_data_stay_aligned() {
    let Some(fs) = xfs_or_skip("incompressible cuts", 1 << 30) else {
        return;
    };
    let dir = fs.mount_point.join("t");
    std::fs::create_dir_all(&dir).unwrap();
    let r = cleave_json(&[
        "gen".as_ref(),
        "--out".as_ref(),
        dir.as_os_str(),
        "--size".as_ref(),
        "64MiB".as_ref(),
        "--random".as_ref(),
        // Partitions of ~3 KiB start everywhere in their 16 KiB chunk: short dead
        // prefixes (under a block) are a quarter of the cuts.
        "--partition-size".as_ref(),
        "3001".as_ref(),
        "--row-size".as_ref(),
        "1000".as_ref(),
        "--json".as_ref(),
    ]);
    let parent = Parent::open(std::path::Path::new(r["data"].as_str().unwrap())).unwrap();
    let policy = Policy::default();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let (mut children, mut fell_back, mut with_lead, mut short) = (0, 0, 0, 0);
    let mut reasons = Vec::new();
    for _ in 0..1000 {
        seed = cleave::gen::splitmix64(seed);
        let plan = parent
            .plan(&Cut::Tokens(vec![Token::Murmur3(seed as i64)]), &policy)
            .unwrap();
        for (i, c) in plan.children.iter().enumerate() {
            let Some(g) = c.geometry else { continue };
            if g.last_chunk < g.first_chunk + 2 {
                continue;
            }
            children += 1;
            with_lead += (g.lead > 0) as u32;
            short += (g.dead_prefix > 0 && g.dead_prefix < 4160) as u32;
            let d = plan.data_layout(i, 4096).unwrap();
            if d.layout != Layout::Aligned || d.fallback.is_some() {
                fell_back += 1;
                reasons.push(format!("{:?} dead {}", d.fallback, g.dead_prefix));
            }
        }
    }
    eprintln!("{children} children with an interior, {short} with a dead prefix under a block, {with_lead} with a lead chunk, {fell_back} fell back: {reasons:?}");
    assert!(children >= 1000, "{children}");
    assert!(
        with_lead > 100,
        "the search must exercise short dead prefixes"
    );
    // Written for real: cuts whose children get a lead chunk pass the pipeline's check and
    // the independent reader.
    let mut tokens = Vec::new();
    let mut s2 = 7u64;
    while tokens.len() < 7 {
        s2 = cleave::gen::splitmix64(s2);
        let t = Token::Murmur3(s2 as i64);
        let plan = parent.plan(&Cut::Tokens(vec![t.clone()]), &policy).unwrap();
        if plan
            .children
            .iter()
            .any(|c| c.geometry.is_some_and(|g| g.lead > 0))
        {
            tokens.push(t);
        }
    }
    tokens.sort();
    let out = fs.mount_point.join("t/out");
    std::fs::create_dir_all(&out).unwrap();
    let list = tokens
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let r = cleave_json(&[
        "split".as_ref(),
        parent.data_path().as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--tokens".as_ref(),
        list.as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(r["check"]["ok"], true);
    let kids = r["children"].as_array().unwrap();
    let aligned = kids
        .iter()
        .filter(|c| c["layout"] == "aligned" && c["fallback"].is_null())
        .count();
    assert!(aligned + 1 >= kids.len(), "{r}");
    if let Some(shared) = corpus_or_skip("incompressible sstcheck") {
        let paths: Vec<std::path::PathBuf> = kids
            .iter()
            .map(|c| std::path::PathBuf::from(c["path"].as_str().unwrap()))
            .collect();
        sstcheck_all(&shared, &paths);
    }
    assert!(
        fell_back * 64 <= children,
        "{fell_back} of {children} fell back: {reasons:?}"
    );
}

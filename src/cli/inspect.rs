//! `cleave inspect <component> [--json] [--quick] [--keys]`, and `cleave inspect <directory>`:
//! the dead-prefix survey of a data, keyspace or table directory (`split::survey`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::failure::Failed;
use cleave::sstable::table::{CheckLevel, CheckProgress, CheckReport};
use cleave::sstable::{hex, SSTable};
use serde::Serialize;

#[derive(clap::Args)]
pub struct InspectArgs {
    /// Any component file of the SSTable (Data.db, Index.db, TOC.txt, ...), or a
    /// directory (a node's data directory, a keyspace's or a table's) to survey: how many
    /// sstables start with a dead prefix, which Cassandra 5.0.5+ misreads (docs/runbook.md).
    pub path: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Check metadata and Index.db only; skip reading Data.db (chunk CRCs, keys, digest).
    #[arg(long)]
    pub quick: bool,
    /// Also list every partition key with its token and Data.db position (in the text
    /// report one line each: token, key in hex, position).
    #[arg(long)]
    pub keys: bool,
}

#[derive(Serialize)]
struct ComponentInfo {
    name: String,
    bytes: u64,
    in_toc: Option<bool>,
}

#[derive(Serialize)]
struct KeyInfo {
    key: String,
    token: String,
    position: u64,
}

#[derive(Serialize)]
struct Inspection {
    path: PathBuf,
    /// The sstable format version (`nb`, `oa`): `version` is the JSON interface's.
    sstable_version: String,
    format: &'static str,
    generation: String,
    partitioner: String,
    compressed: bool,
    compressor: Option<String>,
    chunk_length: Option<u32>,
    chunk_count: Option<usize>,
    max_compressed_length: Option<u32>,
    data_length: u64,
    data_file_bytes: u64,
    partitions: u64,
    /// Leading empty partitions (dead-prefix fillers), not in `partitions`.
    empty_partitions: u64,
    first_position: Option<u64>,
    first_token: Option<String>,
    last_token: Option<String>,
    first_key: String,
    last_key: String,
    keys_xor: String,
    keys_sum: String,
    repaired_at: Option<i64>,
    pending_repair: Option<String>,
    is_transient: Option<bool>,
    sstable_level: Option<i32>,
    bloom_filter_fp_chance: Option<f64>,
    components: Vec<ComponentInfo>,
    missing_from_disk: Vec<String>,
    check: &'static str,
    chunks_checked: u64,
    digest_checked: bool,
    /// Valid, but misread by some Cassandra (`DeadPrefix`).
    warnings: Vec<cleave::sstable::cassandra::Warning>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<Vec<KeyInfo>>,
}

fn uuid(b: &[u8; 16]) -> String {
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

pub fn run(a: InspectArgs) -> Result<ExitCode> {
    // A directory named like a component (`…-Data.db`) is a broken sstable, not a survey.
    let component = cleave::sstable::descriptor::Descriptor::from_path(&a.path).is_ok();
    if a.path.is_dir() && !component {
        return super::failure::report(
            a.json,
            || {
                cleave::split::survey::survey(&a.path).map_err(|e| Failed {
                    reason: e.reason(),
                    message: e.to_string(),
                    path: e.path.clone(),
                })
            },
            |out| {
                if a.json {
                    super::json::print(&out, "survey")?;
                } else {
                    print_survey(&out);
                }
                Ok(ExitCode::SUCCESS)
            },
        );
    }
    super::failure::report(
        a.json,
        || inspect(&a),
        |out| {
            if a.json {
                super::json::print(&out, "inspect")?;
            } else {
                print_human(&out);
            }
            Ok(ExitCode::SUCCESS)
        },
    )
}

fn inspect(a: &InspectArgs) -> std::result::Result<Inspection, Failed> {
    let t = SSTable::open(&super::split::sstable_arg(&a.path)?)?;
    let level = if a.quick {
        CheckLevel::Index
    } else {
        CheckLevel::Full
    };
    let total = cleave::sstable::scan::PartitionSource::span(&t)
        + if a.quick { 0 } else { 2 * t.data_file_size };
    let bar = super::progress::bytes_bar(total, "checking");
    let report: CheckReport = t.check(level, &mut |p| match p {
        CheckProgress::IndexBytes(n) | CheckProgress::DataBytes(n) => bar.inc(n),
    })?;
    bar.finish_and_clear();
    let keys = if a.keys {
        let src = t.partition_source()?;
        let mut r = src.reader(&t)?;
        let mut v = Vec::new();
        while let Some(e) = r.next_entry()? {
            v.push(KeyInfo {
                key: hex::encode(e.key),
                token: t.partitioner.token(e.key).to_string(),
                position: e.position,
            });
        }
        Some(v)
    } else {
        None
    };
    let stats = t.statistics.stats.as_ref();
    let mut missing = Vec::new();
    if let Some(toc) = &t.toc {
        for c in &toc.components {
            if !t.has(c) {
                missing.push(c.file_name().to_string());
            }
        }
    }
    let ci = t.compression.as_ref();
    let out = Inspection {
        path: a.path.clone(),
        sstable_version: t.descriptor.version.to_string(),
        format: t.descriptor.format.as_str(),
        generation: t.descriptor.id.to_string(),
        partitioner: t.partitioner.class_name().to_string(),
        compressed: ci.is_some(),
        compressor: ci.map(|c| c.compressor.clone()),
        chunk_length: ci.map(|c| c.chunk_length),
        chunk_count: ci.map(|c| c.chunk_count()),
        max_compressed_length: ci.and_then(|c| c.max_compressed_length),
        data_length: t.data_length(),
        data_file_bytes: t.data_file_size,
        partitions: report.partitions,
        empty_partitions: report.empty_partitions,
        first_position: report.first_position,
        first_token: report.first_token.clone(),
        last_token: report.last_token.clone(),
        first_key: hex::encode(&report.first_key),
        last_key: hex::encode(&report.last_key),
        keys_xor: format!("{:016x}", report.fingerprint.xor),
        keys_sum: format!("{:016x}", report.fingerprint.sum),
        repaired_at: stats.map(|s| s.repaired_at),
        pending_repair: stats
            .and_then(|s| s.pending_repair.flatten())
            .map(|u| uuid(&u)),
        is_transient: stats.and_then(|s| s.is_transient),
        sstable_level: stats.map(|s| s.sstable_level),
        bloom_filter_fp_chance: t
            .statistics
            .validation
            .as_ref()
            .map(|v| v.bloom_filter_fp_chance),
        components: t
            .files
            .iter()
            .map(|(c, n)| ComponentInfo {
                name: c.file_name().to_string(),
                bytes: *n,
                in_toc: t.toc.as_ref().map(|toc| toc.contains(c)),
            })
            .collect(),
        missing_from_disk: missing,
        check: if a.quick { "index" } else { "full" },
        chunks_checked: report.chunks_checked,
        digest_checked: report.digest_checked,
        warnings: cleave::sstable::cassandra::dead_prefix_warning(report.first_position)
            .into_iter()
            .collect(),
        keys,
    };
    Ok(out)
}

fn print_human(i: &Inspection) {
    println!("{}", i.path.display());
    println!(
        "  version          {} ({} format), generation {}",
        i.sstable_version, i.format, i.generation
    );
    println!("  partitioner      {}", i.partitioner);
    match &i.compressor {
        Some(c) => println!(
            "  compression      {} chunk {} B, {} chunks{}",
            c,
            i.chunk_length.unwrap_or(0),
            i.chunk_count.unwrap_or(0),
            i.max_compressed_length
                .map(|m| format!(", maxCompressedLength {m}"))
                .unwrap_or_default()
        ),
        None => println!("  compression      none (CRC.db)"),
    }
    println!(
        "  data length      {} B uncompressed, {} B on disk",
        i.data_length, i.data_file_bytes
    );
    println!(
        "  partitions       {}{}",
        i.partitions,
        if i.empty_partitions > 0 {
            format!(
                " (+{} empty filler partitions at the start)",
                i.empty_partitions
            )
        } else {
            String::new()
        }
    );
    println!(
        "  first position   {}",
        i.first_position.map_or("-".into(), |p| p.to_string())
    );
    println!(
        "  first            token {} key {}",
        i.first_token.as_deref().unwrap_or("-"),
        i.first_key
    );
    println!(
        "  last             token {} key {}",
        i.last_token.as_deref().unwrap_or("-"),
        i.last_key
    );
    println!("  keys xor/sum     {} / {}", i.keys_xor, i.keys_sum);
    if let Some(r) = i.repaired_at {
        println!(
            "  repair           repairedAt {} pendingRepair {} transient {}",
            r,
            i.pending_repair.as_deref().unwrap_or("none"),
            i.is_transient.map_or("-".into(), |b| b.to_string())
        );
    }
    println!("  components");
    for c in &i.components {
        let note = match c.in_toc {
            Some(false) => "  (not in TOC)",
            _ => "",
        };
        println!("    {:<20} {:>12} B{}", c.name, c.bytes, note);
    }
    for m in &i.missing_from_disk {
        println!("    {m:<20} listed in TOC.txt but missing");
    }
    println!(
        "  check            {} ok: {} chunks{}",
        i.check,
        i.chunks_checked,
        if i.digest_checked { ", digest" } else { "" }
    );
    for w in &i.warnings {
        println!("  warning[{}]: {}", w.reason, w.message);
    }
    if let Some(keys) = &i.keys {
        println!("  keys             token key position");
        for k in keys {
            println!("    {} {} {}", k.token, k.key, k.position);
        }
    }
}

fn print_survey(s: &cleave::split::survey::Survey) {
    println!("{}", s.root.display());
    println!(
        "  sstables         {} live, {} with a dead prefix ({} B of Data.db){}",
        s.sstables,
        s.dead_prefix,
        s.dead_prefix_bytes,
        if s.dead_prefix_aside > 0 {
            format!(
                ", {} more under snapshots/ or backups/",
                s.dead_prefix_aside
            )
        } else {
            String::new()
        }
    );
    for t in s.tables.iter().filter(|t| t.dead_prefix > 0) {
        println!(
            "  {}.{:<24} {} of {} sstables with a dead prefix",
            t.keyspace, t.table, t.dead_prefix, t.sstables
        );
    }
    for f in &s.files {
        println!(
            "    {} first partition at {}{}",
            f.path.display(),
            f.first_position,
            if f.aside { " (snapshot/backup)" } else { "" }
        );
    }
    for u in &s.unreadable {
        println!("  not read [{}]: {}", u.reason, u.message);
    }
    if s.dead_prefix + s.dead_prefix_aside > 0 {
        println!(
            "  warning[DeadPrefix]: Cassandra 5.0.5 and later misread these in compaction, upgradesstables and scrub; before upgrading, rewrite each with Cassandra stopped: cleave rewrite <Data.db> --publish replace (docs/runbook.md)"
        );
    }
}

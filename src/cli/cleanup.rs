//! `cleave cleanup <table dir> --owned-ranges FILE`: drop the partitions this node no longer
//! owns (docs/cleanup.md); the work is `split::cleanup::cleanup`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cleave::split::cleanup::{self, CleanupOptions, CleanupReport, Verdict};
use cleave::split::plan::LayoutRequest;
use cleave::split::{publish, ranges, Policy, SplitError};
use cleave::sstable::{Partitioner, SSTable};

use super::failure::Failed;
use super::split::{DataAccess, DigestArg, LayoutArg, PublishArg};

#[derive(clap::Args)]
pub struct CleanupArgs {
    /// The table directory (`<data dir>/<keyspace>/<table>-<id>`).
    pub table_dir: PathBuf,
    /// YAML file of the ranges this node owns, `[{start, end}]` meaning (start, end], as for
    /// `split --ranges`; the partitions outside them are dropped.
    #[arg(long)]
    pub owned_ranges: PathBuf,
    /// `replace` (the default; Cassandra must be stopped): one transaction swaps the split
    /// and dropped sstables for the children. `stage`: children into `--out`, the table
    /// untouched. `on-restart` (Cassandra may run): the children and the sstables to drop
    /// recorded in the table's `.cleave-pending/<job-uid>/`, published by `cleave
    /// apply-pending` in one CLEANUP transaction before Cassandra's next start.
    #[arg(long, value_enum, default_value = "replace")]
    pub publish: PublishArg,
    /// With `--publish on-restart`: the job's uid (letters, digits, '-', '_'); default a
    /// fresh UUID.
    #[arg(long)]
    pub job_uid: Option<String>,
    /// Split sstables written and checked at the same moment.
    #[arg(long, default_value_t = 1)]
    pub parallelism: usize,
    /// Where `stage` writes (on the table's filesystem, not the table directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The Cassandra release that will read the children; unknown (the default) is the
    /// strictest: no child starts with a dead prefix (docs/compatibility.md).
    #[arg(long, default_value = "unknown", value_parser = clap::value_parser!(cleave::sstable::cassandra::TargetCassandra))]
    pub target_cassandra: cleave::sstable::cassandra::TargetCassandra,
    #[arg(long, value_enum, default_value = "auto")]
    pub layout: LayoutArg,
    #[arg(long, value_enum, default_value = "mmap")]
    pub target_data_access: DataAccess,
    /// `off` (the default, as for split): `combine` reads every chunk's CRC trailer, which
    /// on a cold cache pages in most of the children's Data.db (measured on two 64 MiB
    /// sstables: 46 MiB read, against 2 MiB without it; docs/cleanup.md).
    /// BTI parents: how cleanup learns partition keys (`trie`: from Partitions.db,
    /// children share the parent's Filter.db; `data`: every key from Data.db).
    #[arg(long, value_enum, default_value = "trie")]
    pub bti_keys: super::split::BtiKeysArg,
    #[arg(long, value_enum, default_value = "off")]
    pub digest: DigestArg,
    /// Owned runs touching fewer chunks than this merge into one regrid child per sstable.
    #[arg(long, default_value_t = 8)]
    pub merge_below_chunks: u64,
    /// Classify and plan every sstable; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub space: super::split::SpaceArg,
}

/// The table's partitioner, from its first sstable (Murmur3 for a table without any).
fn partitioner(a: &CleanupArgs) -> Result<Partitioner, Failed> {
    let paths = cleanup::list_sstables(&a.table_dir).map_err(SplitError::from)?;
    match paths.first() {
        Some(p) => Ok(SSTable::open(p)?.partitioner),
        None => Ok(Partitioner::Murmur3),
    }
}

/// A directory without any sstable is not what `cleanup` takes: a keyspace directory (its
/// table directories `<table>-<id>` inside), or an empty or mistyped one. Refused, saying
/// what was expected, instead of a run that finds nothing and reports success. A path that
/// is not a directory is left to the library's own refusal.
fn check_table_dir(a: &CleanupArgs) -> Result<(), Failed> {
    let dir = &a.table_dir;
    if !dir.is_dir()
        || !cleanup::list_sstables(dir)
            .map_err(SplitError::from)?
            .is_empty()
    {
        return Ok(());
    }
    let mut tables: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Failed::io(dir, e))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| {
            n.rsplit_once('-').is_some_and(|(t, id)| {
                !t.is_empty() && id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
            })
        })
        .collect();
    tables.sort();
    let expected = "expected a table directory, <data dir>/<keyspace>/<table>-<id>, holding the table's sstables";
    Err(Failed::invalid(
        dir,
        if tables.is_empty() {
            format!(
                "{}: holds no sstable (no *-Data.db): {expected}; nothing was changed",
                dir.display()
            )
        } else {
            format!(
                "{}: a keyspace directory (it holds the table directories {}): {expected}; clean up each table directory in turn; nothing was changed",
                dir.display(),
                tables.join(", ")
            )
        },
    ))
}

fn run_cleanup(a: &CleanupArgs) -> Result<CleanupReport, Failed> {
    let text =
        std::fs::read_to_string(&a.owned_ranges).map_err(|e| Failed::io(&a.owned_ranges, e))?;
    let file = ranges::parse_ranges_yaml(&text).map_err(|e| {
        Failed::invalid(
            &a.owned_ranges,
            format!("--owned-ranges {}: {e}", a.owned_ranges.display()),
        )
    })?;
    if !file.transient_ranges.is_empty() {
        return Err(Failed::invalid(
            &a.owned_ranges,
            "--owned-ranges: transientRanges have no meaning for cleanup (a transient replica's data is owned); list them in ranges",
        ));
    }
    // Refused before anything is written (issue 31, items 4 and 5): a table or stage
    // directory a transaction log cannot be read back from, and a stage directory that
    // already holds sstables (a previous cleanup's children would be imported twice).
    let log_dir = match (a.publish, &a.out) {
        (PublishArg::Stage, Some(out)) => out,
        _ => &a.table_dir,
    };
    let refused = publish::check_log_path(log_dir).and_then(|()| match (a.publish, &a.out) {
        (PublishArg::Stage, Some(out)) => publish::check_stage_out(out, &a.table_dir),
        _ => Ok(()),
    });
    refused.map_err(SplitError::from)?;
    check_table_dir(a)?;
    if let (PublishArg::Stage, Some(out)) = (a.publish, &a.out) {
        super::warn_if_5_0_import_skips(out);
    }
    let p = partitioner(a)?;
    let owned = ranges::to_token_ranges(p, &file.ranges)
        .map_err(|e| Failed::invalid(&a.owned_ranges, format!("--owned-ranges: {e}")))?;
    let opts = CleanupOptions {
        policy: Policy {
            layout: LayoutRequest::from(a.layout).layout(),
            allow_padded: a.target_data_access == DataAccess::Standard,
            digest: a.digest.into(),
            merge_below_chunks: a.merge_below_chunks,
            throttle: None,
            target: a.target_cassandra,
            bti_keys: a.bti_keys.into(),
        },
        publish: a.publish.into(),
        out_dir: a.out.clone(),
        dry_run: a.dry_run,
        gate: None,
        job_uid: (a.publish == PublishArg::OnRestart).then(|| {
            a.job_uid
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().hyphenated().to_string())
        }),
        parallelism: a.parallelism,
        min_free_percent: Some(a.space.min_free_percent),
    };
    Ok(cleanup::cleanup(&a.table_dir, &owned, &opts)?)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

pub fn run(a: CleanupArgs) -> Result<ExitCode> {
    let r = match run_cleanup(&a) {
        Ok(r) => r,
        Err(f) => return Ok(f.print(a.json)),
    };
    if a.json {
        super::json::print(&r, "cleanup")?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} sstables: {} kept, {} dropped, {} split into {} children{}",
        r.table_dir.display(),
        r.sstables.len(),
        r.kept,
        r.dropped,
        r.split,
        r.children,
        if r.dry_run { " (dry run)" } else { "" }
    );
    for s in &r.sstables {
        let what = match s.verdict {
            Verdict::Kept => "kept".to_string(),
            Verdict::Dropped => format!("dropped ({} partitions)", s.partitions),
            Verdict::Split => format!(
                "split: {} of {} partitions owned, {} children, shared {} copied {} re-encoded {}",
                s.owned_partitions,
                s.partitions,
                s.children.len().max(s.plan.len()),
                mib(s.bytes_shared),
                mib(s.bytes_copied),
                mib(s.bytes_reencoded)
            ),
        };
        println!("  {}: {what}", s.path.display());
        for c in &s.children {
            println!("    {}: {} partitions", c.path.display(), c.partitions);
        }
    }
    println!(
        "  {} partitions {}dropped; {} {}; device I/O read {} written {}; {:.2} s",
        r.partitions_dropped,
        if r.dry_run { "would be " } else { "" },
        if r.dry_run {
            "would reclaim (predicted)"
        } else {
            "reclaimed"
        },
        mib(r.bytes_reclaimed),
        mib(r.read_bytes),
        mib(r.write_bytes),
        r.seconds
    );
    for l in &r.left_behind {
        println!("  left behind: {l}");
    }
    if let (Some(uid), false) = (&r.job_uid, r.dry_run) {
        println!(
            "  recorded as job {uid} in {}: `cleave apply-pending` publishes it (one CLEANUP transaction) before Cassandra's next start",
            r.table_dir.join(cleave::split::intent::PENDING_DIR).join(uid).display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

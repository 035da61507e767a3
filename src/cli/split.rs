//! `cleave split`, `cleave verify`, `cleave recover`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use cleave::reason::Reason;
use cleave::split::plan::LayoutRequest;
use cleave::split::publish::{self, Publish};
use cleave::split::spec::{Cut, RepairSession, RepairedRanges};
use cleave::split::{
    self as engine, DigestPolicy, Parent, Policy, RunProgress, SplitError, SplitReport, Target,
};
use cleave::split::{intent, ranges, space};
use cleave::sstable::table::{CheckLevel, CheckProgress};
use cleave::sstable::SSTable;

/// `--layout`: the CLI's lowercase spelling of the engine's `LayoutRequest` (the engine
/// derives no clap traits; `From` maps).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LayoutArg {
    Auto,
    Aligned,
    Padded,
    Copy,
    Regrid,
}

impl From<LayoutArg> for LayoutRequest {
    fn from(a: LayoutArg) -> LayoutRequest {
        match a {
            LayoutArg::Auto => LayoutRequest::Auto,
            LayoutArg::Aligned => LayoutRequest::Aligned,
            LayoutArg::Padded => LayoutRequest::Padded,
            LayoutArg::Copy => LayoutRequest::Copy,
            LayoutArg::Regrid => LayoutRequest::Regrid,
        }
    }
}

/// `--digest`: the CLI's spelling of `DigestPolicy`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DigestArg {
    /// No Digest.crc32 (TOC omits it): fastest; `nodetool verify` then takes the extended
    /// path, which rejects a dead prefix.
    Off,
    /// CRC32 of the child file derived from the chunk CRC trailers (reads 4 bytes a chunk).
    Combine,
    /// CRC32 of the child file read back in full.
    Full,
}

/// `--bti-keys`: the CLI's spelling of `BtiKeys`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BtiKeysArg {
    /// From Partitions.db's prefixes; Data.db is read only at the cuts, and each child gets
    /// a copy of the parent's Filter.db (a superset: reads stay correct, each child holds
    /// the parent's filter memory until compacted; docs/bti.md).
    Trie,
    /// Every key read from Data.db (decodes every chunk); each child gets its own filter.
    Data,
}

impl From<BtiKeysArg> for cleave::split::plan::BtiKeys {
    fn from(a: BtiKeysArg) -> Self {
        match a {
            BtiKeysArg::Trie => Self::Trie,
            BtiKeysArg::Data => Self::Data,
        }
    }
}

impl From<DigestArg> for DigestPolicy {
    fn from(a: DigestArg) -> DigestPolicy {
        match a {
            DigestArg::Off => DigestPolicy::Off,
            DigestArg::Combine => DigestPolicy::Combine,
            DigestArg::Full => DigestPolicy::Full,
        }
    }
}

/// `--publish`: the CLI's spelling of `Publish`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PublishArg {
    /// Leave the children in `--out` for `nodetool import --keep-repaired`; the parent is
    /// untouched.
    Stage,
    /// Children into the parent's table directory and the parent out, atomically.
    Replace,
    /// Children staged in the table's `.cleave-pending/<job-uid>/` with an intent,
    /// published by `cleave apply-pending` before Cassandra's next start.
    OnRestart,
}

impl From<PublishArg> for Publish {
    fn from(a: PublishArg) -> Publish {
        match a {
            PublishArg::Stage => Publish::Stage,
            PublishArg::Replace => Publish::Replace,
            PublishArg::OnRestart => Publish::OnRestart,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DataAccess {
    /// Data.db may be mmap'd (3.x/4.x default `auto`, 5.0 `mmap`/`legacy`): no head pad.
    Mmap,
    /// Data.db is read with positional reads (5.0 default `mmap_index_only`): `padded` allowed.
    Standard,
}

/// `--min-free-percent`: the operator's space pre-flight (`split::space`), for the commands
/// that write (`split`, `rewrite`, `cleanup`, `apply-pending`).
#[derive(clap::Args, Clone, Copy)]
pub struct SpaceArg {
    /// Refused with InsufficientSpace before the first byte is written when what the run
    /// writes would leave less than this share of the filesystem free (`cleave run`'s
    /// default; 0 keeps no reserve).
    #[arg(long, env = "CLEAVE_MIN_FREE_PERCENT", default_value_t = space::DEFAULT_MIN_FREE_PERCENT, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub min_free_percent: u8,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("cut").required(true).args(["tokens", "parts", "ranges"])))]
pub struct SplitArgs {
    /// The parent's Data.db (or any of its components).
    pub parent: PathBuf,
    /// Directory for the children; on the parent's filesystem.
    #[arg(long)]
    pub out: PathBuf,
    /// Token boundaries T1,T2,…: children (MIN,T1], (T1,T2], …, (Tn,MAX].
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub tokens: Option<Vec<String>>,
    /// N children of about equal Data.db bytes, cut at partition boundaries.
    #[arg(long)]
    pub parts: Option<usize>,
    /// YAML file of repaired ranges `[{start, end}]` ((start, end]); or a mapping with
    /// `ranges` and `transientRanges`. Anticompaction: children per label.
    #[arg(long)]
    pub ranges: Option<PathBuf>,
    /// YAML file of transient ranges (with --ranges and --pending-repair).
    #[arg(long, requires = "ranges")]
    pub transient_ranges: Option<PathBuf>,
    /// Repaired data is marked repaired at this time (ms since the epoch).
    #[arg(
        long,
        requires = "ranges",
        conflicts_with = "pending_repair",
        allow_hyphen_values = true
    )]
    pub repaired_at: Option<i64>,
    /// Repaired data is pending this incremental-repair session (UUID).
    #[arg(long, requires = "ranges")]
    pub pending_repair: Option<String>,
    #[arg(long, value_enum, default_value = "auto")]
    pub layout: LayoutArg,
    /// How the target nodes read Data.db; `standard` allows the `padded` fallback.
    #[arg(long, value_enum, default_value = "mmap")]
    pub target_data_access: DataAccess,
    /// The Cassandra release that will read the children (`3.11.17`, `4.1`, `5.0.5`, ...).
    /// From 5.0.5 — and when unknown, the default — compaction reads Data.db from
    /// position 0, so a child's dead prefix is filled with empty partitions, or the child
    /// is re-encoded (`regrid`) where no filler fits (docs/compatibility.md).
    #[arg(long, default_value = "unknown", value_parser = clap::value_parser!(cleave::sstable::cassandra::TargetCassandra))]
    pub target_cassandra: cleave::sstable::cassandra::TargetCassandra,
    /// BTI parents: how the split learns partition keys (`trie`: from Partitions.db,
    /// children share the parent's Filter.db; `data`: every key from Data.db).
    #[arg(long, value_enum, default_value = "trie")]
    pub bti_keys: BtiKeysArg,
    #[arg(long, value_enum, default_value = "off")]
    pub digest: DigestArg,
    /// `stage`: children into `--out` for `nodetool import --keep-repaired`; `replace`:
    /// swapped in for the parent (Cassandra stopped); `on-restart`: staged in the table's
    /// `.cleave-pending/<job-uid>/` with an intent, published by `cleave apply-pending`
    /// before Cassandra's next start (`--out` is the table directory).
    #[arg(long, value_enum, default_value = "stage")]
    pub publish: PublishArg,
    /// With `--publish on-restart`: the job's uid (letters, digits, '-', '_'); default a
    /// fresh UUID.
    #[arg(long)]
    pub job_uid: Option<String>,
    /// Anticompaction runs touching fewer chunks than this merge into one regrid child per label.
    #[arg(long, default_value_t = 8)]
    pub merge_below_chunks: u64,
    /// Print the plan without writing anything.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub space: SpaceArg,
    /// Set by `rewrite` only: one child is what it asks for.
    #[arg(skip)]
    pub single: bool,
}

fn parse_uuid(s: &str) -> Result<[u8; 16]> {
    let u = uuid::Uuid::parse_str(s)
        .map_err(|e| anyhow!("--pending-repair {s:?} is not a UUID: {e}"))?;
    Ok(*u.as_bytes())
}

fn cut_from_args(a: &SplitArgs, t: &SSTable) -> Result<Cut> {
    let p = t.partitioner;
    // The repair markers label the repaired children of --ranges; a cut by tokens or parts
    // has none, and the children keep the parent's repair state. Refused rather than
    // ignored (clap's `requires = "ranges"` let them through with --tokens: issue 37).
    if a.ranges.is_none() {
        for (flag, given) in [
            ("--repaired-at", a.repaired_at.is_some()),
            ("--pending-repair", a.pending_repair.is_some()),
        ] {
            if given {
                bail!("{flag} marks the repaired children of --ranges; with --tokens or --parts every child keeps the parent's repair state: give --ranges, or leave {flag} out");
            }
        }
    }
    if let Some(tokens) = &a.tokens {
        let b = tokens
            .iter()
            .map(|s| p.parse_token(s).map_err(|e| anyhow!("--tokens: {e}")))
            .collect::<Result<Vec<_>>>()?;
        return Ok(Cut::Tokens(b));
    }
    if let Some(n) = a.parts {
        // `rewrite` asks for one child; a split for at least two.
        if n < 2 && !a.single {
            bail!("--parts {n}: expected at least 2");
        }
        return Ok(Cut::Parts(n));
    }
    let path = a
        .ranges
        .as_ref()
        .ok_or_else(|| anyhow!("one of --tokens, --parts, --ranges is required"))?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --ranges {}", path.display()))?;
    let file = ranges::parse_ranges_yaml(&text)
        .map_err(|e| anyhow!("--ranges {}: {e}", path.display()))?;
    let mut transient = file.transient_ranges.clone();
    if let Some(tp) = &a.transient_ranges {
        let text = std::fs::read_to_string(tp)
            .with_context(|| format!("reading --transient-ranges {}", tp.display()))?;
        let f = ranges::parse_ranges_yaml(&text)
            .map_err(|e| anyhow!("--transient-ranges {}: {e}", tp.display()))?;
        transient.extend(f.ranges);
    }
    let session = match (&a.repaired_at, &a.pending_repair) {
        (Some(ms), None) => RepairSession::RepairedAt(*ms),
        (None, Some(u)) => RepairSession::Pending(parse_uuid(u)?),
        _ => bail!("--ranges needs exactly one of --repaired-at MS or --pending-repair UUID"),
    };
    Ok(Cut::Ranges(RepairedRanges {
        full: ranges::to_token_ranges(p, &file.ranges).map_err(|e| anyhow!("--ranges: {e}"))?,
        transient: ranges::to_token_ranges(p, &transient)
            .map_err(|e| anyhow!("--transient-ranges: {e}"))?,
        session,
    }))
}

pub use super::failure::Failed;

/// An sstable path as given on the command line, ready for the library: a bare file name
/// (`nb-1-big-Data.db`, run from the table directory) becomes `./nb-1-big-Data.db`, so that
/// its directory is `.` rather than the empty path every later step would fail on; a name
/// that is not an sstable component's is the request's fault (`InvalidRequest`), not the
/// file's (`CorruptSSTable`: nothing of it was read).
pub fn sstable_arg(p: &std::path::Path) -> Result<PathBuf, Failed> {
    let p = match p.parent() {
        Some(d) if d.as_os_str().is_empty() => std::path::Path::new(".").join(p),
        _ => p.to_path_buf(),
    };
    match cleave::sstable::Descriptor::from_path(&p) {
        Err(e @ cleave::sstable::FormatError::Corrupt { .. }) => Err(Failed::invalid(
            &p,
            format!(
                "{}: not an sstable component name (expected <version>-<generation>-<format>-<Component>, e.g. nb-1-big-Data.db): {e}",
                p.display()
            ),
        )),
        _ => Ok(p),
    }
}

pub fn run(mut a: SplitArgs) -> Result<ExitCode> {
    a.parent = match sstable_arg(&a.parent) {
        Ok(p) => p,
        Err(f) => return Ok(f.print(a.json)),
    };
    if a.publish == PublishArg::OnRestart {
        return match split_on_restart(&a) {
            Ok(r) => {
                if a.json {
                    super::json::print(&r, "pend")?;
                } else {
                    println!(
                        "{}: {} children staged for job {}, published by `cleave apply-pending` before Cassandra's next start",
                        r.split.parent.display(),
                        r.split.children.len(),
                        r.job_uid
                    );
                    println!("  intent: {}", r.intent.display());
                    for c in &r.split.children {
                        println!("  {}: {} partitions", c.path.display(), c.partitions);
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(f) => Ok(f.print(a.json)),
        };
    }
    match split(&a) {
        Ok(report) => {
            if a.json {
                super::json::print(&report, "split")?;
            } else {
                print_human(&report);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(f) => Ok(f.print(a.json)),
    }
}

/// `cleave rewrite <Data.db> [--publish replace|stage] [--out DIR]`: one `regrid` child
/// holding every partition of the sstable from position 0, through the split pipeline
/// (staging, the full check, and for `replace` the transaction log that swaps it in for
/// the original, or is rolled back, whatever happens).
#[derive(clap::Args)]
pub struct RewriteArgs {
    /// The sstable's Data.db (or any of its components).
    pub sstable: PathBuf,
    /// `replace` (the default; Cassandra must be stopped) swaps the rewritten sstable in
    /// for the original; `stage` writes it beside, for `nodetool import --keep-repaired`.
    #[arg(long, value_enum, default_value = "replace")]
    pub publish: PublishArg,
    /// Where `stage` writes: an empty directory on the table's filesystem (required with
    /// `stage`; the table directory is refused, where both copies would be live).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "off")]
    pub digest: DigestArg,
    /// Rewrite even when the first partition is already at position 0.
    #[arg(long)]
    pub force: bool,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub space: SpaceArg,
}

pub fn rewrite(mut a: RewriteArgs) -> Result<ExitCode> {
    a.sstable = match sstable_arg(&a.sstable) {
        Ok(p) => p,
        Err(f) => return Ok(f.print(a.json)),
    };
    let first = SSTable::open(&a.sstable).and_then(|t| {
        let src = t.partition_source()?;
        let mut r = src.reader(&t)?;
        Ok(r.next_entry()?.map(|e| e.position))
    });
    let first = match first {
        Ok(p) => p,
        Err(e) => return Ok(Failed::from(e).print(a.json)),
    };
    if first.unwrap_or(0) == 0 && !a.force {
        if a.json {
            super::json::print(
                &serde_json::json!({"path": a.sstable, "rewritten": false, "first_position": first}),
                "rewrite",
            )?;
        } else {
            println!(
                "{}: the first partition is at position 0: nothing to rewrite",
                a.sstable.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let dir = a
        .sstable
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    if a.publish == PublishArg::Stage && a.out.is_none() {
        // Staged beside the original, the rewritten copy would be live with it: every row
        // twice (issue 31, item 5).
        return Ok(Failed::invalid(
            &a.sstable,
            "rewrite --publish stage needs --out DIR, an empty directory on the table's filesystem: staged in the table directory the rewritten sstable would be live beside the original (every row twice)",
        )
        .print(a.json));
    }
    let args = SplitArgs {
        parent: a.sstable.clone(),
        out: a.out.clone().unwrap_or(dir),
        tokens: None,
        parts: Some(1),
        ranges: None,
        transient_ranges: None,
        repaired_at: None,
        pending_repair: None,
        layout: LayoutArg::Regrid,
        target_data_access: DataAccess::Mmap,
        target_cassandra: Default::default(),
        digest: a.digest,
        bti_keys: BtiKeysArg::Trie,
        merge_below_chunks: 0,
        publish: a.publish,
        job_uid: None,
        dry_run: false,
        json: a.json,
        space: a.space,
        single: true,
    };
    run(args)
}

fn policy_of(a: &SplitArgs) -> Policy {
    Policy {
        layout: LayoutRequest::from(a.layout).layout(),
        allow_padded: a.target_data_access == DataAccess::Standard,
        digest: a.digest.into(),
        merge_below_chunks: a.merge_below_chunks,
        throttle: None,
        target: a.target_cassandra,
        bti_keys: a.bti_keys.into(),
    }
}

/// `--publish on-restart`: stage and record the intent (`split::intent`).
fn split_on_restart(a: &SplitArgs) -> Result<intent::PendReport, Failed> {
    if a.dry_run {
        return Err(Failed::invalid(
            &a.parent,
            "--dry-run with --publish on-restart: use --publish stage --dry-run to see the plan",
        ));
    }
    let job_uid = a
        .job_uid
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().hyphenated().to_string());
    refuse_before_writing(a)?;
    let target = Target {
        out_dir: a.out.clone(),
        publish: Publish::OnRestart,
        dry_run: false,
    };
    let lock = engine::lock(&a.parent, &target).map_err(SplitError::from)?;
    let parent = Parent::open(&a.parent).map_err(SplitError::from)?;
    let cut = cut_from_args(a, parent.table()).map_err(|e| Failed {
        reason: Reason::InvalidRequest,
        message: format!("{e:#}"),
        path: a.ranges.clone().unwrap_or_else(|| a.parent.clone()),
    })?;
    // --out must be the table directory: checked before writing, as Replace does.
    let table = std::fs::canonicalize(parent.dir()).map_err(|e| Failed::io(parent.dir(), e))?;
    let out = std::fs::canonicalize(&a.out).map_err(|e| Failed::io(&a.out, e))?;
    if out != table {
        // Not `NotTableDir`, whose message is Replace's.
        return Err(Failed::invalid(
            &a.out,
            format!(
                "--publish on-restart stages the children in the table directory's {}/<job-uid>/ and needs --out to be the parent's table directory {} (got {})",
                intent::PENDING_DIR,
                table.display(),
                out.display()
            ),
        ));
    }
    check_parts(a, &parent, &cut)?;
    check_space(a)?;
    Ok(intent::split_pending(
        &parent,
        &cut,
        &policy_of(a),
        &job_uid,
        &lock,
    )?)
}

/// The parent's table directory as `engine::lock` takes it.
fn parent_dir(a: &SplitArgs) -> &std::path::Path {
    a.parent
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."))
}

/// What is refused before the parent is opened or anything written (a dry run too, so
/// that it does not promise what the run refuses): a transaction log could not be read
/// back under `--out` (Stage's log) or the table directory (Replace's, issue 31 item 4),
/// and a Stage into the live table directory or beside a previous split's children
/// (item 5).
fn refuse_before_writing(a: &SplitArgs) -> Result<(), Failed> {
    refuse_dead_prefix_target(a)?;
    let table_dir = parent_dir(a);
    let checked = match a.publish {
        PublishArg::Stage => {
            super::warn_if_5_0_import_skips(&a.out);
            publish::check_log_path(&a.out)
                .and_then(|()| publish::check_stage_out(&a.out, table_dir))
        }
        PublishArg::Replace | PublishArg::OnRestart => {
            publish::check_log_path(table_dir).and_then(|()| publish::check_log_path(&a.out))
        }
    };
    checked.map_err(|e| SplitError::from(e).into())
}

/// `--target-cassandra` 3.0–5.0.4 keeps a dead prefix in the children; a node that runs
/// 5.0.5 or later misreads it in every compaction (`SSTableSimpleScanner` scans Data.db
/// from position 0, CASSANDRA-20092). The parent's node is found as the sidecar finds it
/// offline: `release_version` in the `system.local` sstables of the data directory the
/// parent lives in (`<data>/<keyspace>/<table>/`, so `<data>/system/local-*`). Known to
/// be 5.0.5+: refused, as `operator::job::target_cassandra` refuses the same target on such
/// a node. No data directory there, or no readable release: the operator's explicit choice
/// stands (`cleave survey` counts what it leaves).
fn refuse_dead_prefix_target(a: &SplitArgs) -> Result<(), Failed> {
    if a.target_cassandra.scans_data_from_zero() {
        return Ok(());
    }
    // Absolute first: a parent named relative to its table or keyspace directory
    // (`nb-1-big-Data.db`) has its data directory above the working directory.
    let Ok(table_dir) = std::fs::canonicalize(parent_dir(a)) else {
        return Ok(());
    };
    let Some(data_dir) = table_dir.parent().and_then(std::path::Path::parent) else {
        return Ok(());
    };
    if !data_dir.join("system").is_dir() {
        return Ok(());
    }
    match cleave::operator::release::from_system_local(data_dir) {
        Ok((node, sstable)) if node.scans_data_from_zero() => Err(Failed::invalid(
            &a.parent,
            format!(
                "--target-cassandra {} keeps a dead prefix in the children, which this node's \
                 Cassandra {node} (release_version in {}) misreads in every compaction (5.0.5 \
                 and later scan Data.db from position 0); leave --target-cassandra unset",
                a.target_cassandra,
                sstable.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// `--parts N` beyond the parent's partitions: the engine makes `min(N, partitions)`
/// children (a child holds at least one partition), which asked for N on the command line
/// is a silent surprise. Refused with the count before anything is written. Counting takes
/// a plan (from Summary.db's samples, or one pass over Index.db where they cannot serve);
/// the run plans again.
fn check_parts(a: &SplitArgs, parent: &Parent, cut: &Cut) -> Result<(), Failed> {
    let Cut::Parts(n) = cut else {
        return Ok(());
    };
    if a.single {
        return Ok(());
    }
    let plan = parent
        .plan(cut, &policy_of(a))
        .map_err(|e| Failed::from(SplitError::from(e)))?;
    if *n as u64 > plan.partitions {
        return Err(Failed::invalid(
            &a.parent,
            format!(
                "--parts {n}: {} has {} partitions, and each child holds at least one: ask for at most {}",
                a.parent.display(),
                plan.partitions,
                plan.partitions
            ),
        ));
    }
    Ok(())
}

/// The space pre-flight (`split::space`) on `--out`, before the first byte is written —
/// in a dry run too, which must not promise what the run refuses. An `--out` that is not a
/// directory is left to the engine's own refusal.
fn check_space(a: &SplitArgs) -> Result<(), Failed> {
    if !a.out.is_dir() {
        return Ok(());
    }
    let layout = LayoutRequest::from(a.layout).layout();
    let predicted = space::predicted_bytes(&a.parent, space::shares_data(&a.out, layout));
    space::preflight(&a.out, predicted, a.space.min_free_percent)
        .map_err(|e| SplitError::from(e).into())
}

fn split(a: &SplitArgs) -> Result<SplitReport, Failed> {
    refuse_before_writing(a)?;
    let target = Target {
        out_dir: a.out.clone(),
        publish: a.publish.into(),
        dry_run: a.dry_run,
    };
    let lock = engine::lock(&a.parent, &target).map_err(SplitError::from)?;
    let parent = Parent::open(&a.parent).map_err(SplitError::from)?;
    let cut = cut_from_args(a, parent.table()).map_err(|e| Failed {
        reason: Reason::InvalidRequest,
        message: format!("{e:#}"),
        path: a.ranges.clone().unwrap_or_else(|| a.parent.clone()),
    })?;
    check_parts(a, &parent, &cut)?;
    check_space(a)?;
    let policy = policy_of(a);
    let index_len = cleave::sstable::scan::PartitionSource::span(parent.table());
    let bar = super::progress::bytes_bar(2 * index_len, "splitting");
    let r = engine::run(&parent, &cut, &policy, &target, &lock, &mut |p| match p {
        RunProgress::Index { pass, bytes, .. } => {
            bar.set_position((pass as u64 - 1) * index_len + bytes)
        }
        RunProgress::ChildDone { .. } => {}
    });
    bar.finish_and_clear();
    Ok(r?)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

fn print_human(r: &SplitReport) {
    println!(
        "{}: {} children{}",
        r.parent.display(),
        r.plan.len(),
        if r.dry_run { " (dry run)" } else { "" }
    );
    println!("  reflink: {}", r.reflink);
    if r.dry_run {
        for (i, p) in r.plan.iter().enumerate() {
            let g = p.geometry;
            let tokens = match (p.child.runs.first(), p.child.runs.last()) {
                (Some(f), Some(l)) => format!(", tokens {}..{}", f.first_token, l.last_token),
                _ => String::new(),
            };
            println!(
                "  child {i}: {} partitions{tokens}, {} bytes, layout {:?}{}, predicted shared {} copied {} re-encoded {}{}",
                p.child.partitions(),
                p.child.bytes(),
                p.layout,
                g.map(|g| format!(" (chunks {}..={}, dead prefix {})", g.first_chunk, g.last_chunk, g.dead_prefix)).unwrap_or_default(),
                mib(p.predicted.bytes_shared),
                mib(p.predicted.bytes_copied),
                mib(p.predicted.bytes_reencoded),
                p.fallback.as_ref().map(|r| format!(" — {r}")).unwrap_or_default()
            );
        }
        println!(
            "  predicted: {} partitions; shared {} copied {} re-encoded {}; nothing written or checked",
            r.parent_partitions,
            mib(r.bytes_shared),
            mib(r.bytes_copied),
            mib(r.bytes_reencoded)
        );
        return;
    }
    for c in &r.children {
        println!(
            "  {}: {} partitions, tokens {}..{}, {:?}, shared {} copied {} re-encoded {}{}",
            c.path.display(),
            c.partitions,
            c.first_token,
            c.last_token,
            c.layout,
            mib(c.bytes_shared),
            mib(c.bytes_copied),
            mib(c.bytes_reencoded),
            c.fallback
                .as_ref()
                .map(|r| format!(" — fallback [{}]: {r}", r.reason()))
                .unwrap_or_default()
        );
    }
    if let Some(c) = &r.check {
        println!(
            "  check: parent ({}, {:016x}, {:016x}) = children ({}, {:016x}, {:016x}): {}",
            c.parent.count,
            c.parent.xor,
            c.parent.sum,
            c.children.count,
            c.children.xor,
            c.children.sum,
            if c.ok { "ok" } else { "MISMATCH" }
        );
    }
    println!(
        "  device I/O: read {} written {}",
        mib(r.read_bytes),
        mib(r.write_bytes)
    );
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// Data.db (or any component) of each sstable.
    #[arg(required = true)]
    pub sstables: Vec<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct Verified {
    path: PathBuf,
    ok: bool,
    partitions: u64,
    keys_xor: String,
    keys_sum: String,
    /// Leading empty partitions (dead-prefix fillers), not counted in `partitions`.
    empty_partitions: u64,
    /// Where the first indexed partition starts; not 0 is a dead prefix (`warnings`).
    first_position: Option<u64>,
    /// Valid, but misread by some Cassandra (`DeadPrefix`).
    warnings: Vec<cleave::sstable::cassandra::Warning>,
    /// `{"reason", "message", "path"}`, as every failure is reported.
    error: Option<serde_json::Value>,
    #[serde(skip)]
    failed: Option<Failed>,
}

/// Full check of each sstable: every index position holds its key in Data.db, every chunk
/// CRC, the digest; prints partitions and the key fingerprint, and their total.
pub fn verify(a: VerifyArgs) -> Result<ExitCode> {
    let mut all_ok = true;
    let mut total = cleave::sstable::fingerprint::Fingerprint::default();
    let mut out = Vec::new();
    for p in &a.sstables {
        let res = sstable_arg(p).and_then(|p| {
            SSTable::open(&p)
                .and_then(|t| {
                    let total_bytes =
                        cleave::sstable::scan::PartitionSource::span(&t) + 2 * t.data_file_size;
                    let bar = super::progress::bytes_bar(total_bytes, "verifying");
                    let r = t.check(CheckLevel::Full, &mut |pr| match pr {
                        CheckProgress::IndexBytes(n) | CheckProgress::DataBytes(n) => bar.inc(n),
                    });
                    bar.finish_and_clear();
                    r
                })
                .map_err(Failed::from)
        });
        match res {
            Ok(r) => {
                total.merge(&r.fingerprint);
                out.push(Verified {
                    path: p.clone(),
                    ok: true,
                    partitions: r.partitions,
                    keys_xor: format!("{:016x}", r.fingerprint.xor),
                    keys_sum: format!("{:016x}", r.fingerprint.sum),
                    empty_partitions: r.empty_partitions,
                    first_position: r.first_position,
                    warnings: cleave::sstable::cassandra::dead_prefix_warning(r.first_position)
                        .into_iter()
                        .collect(),
                    error: None,
                    failed: None,
                });
            }
            Err(f) => {
                all_ok = false;
                out.push(Verified {
                    path: p.clone(),
                    ok: false,
                    partitions: 0,
                    keys_xor: String::new(),
                    keys_sum: String::new(),
                    empty_partitions: 0,
                    first_position: None,
                    warnings: Vec::new(),
                    error: Some(f.json()),
                    failed: Some(f),
                });
            }
        }
    }
    if a.json {
        let v = serde_json::json!({
            "sstables": out,
            "total": { "partitions": total.count, "keys_xor": format!("{:016x}", total.xor), "keys_sum": format!("{:016x}", total.sum) },
            "ok": all_ok,
        });
        super::json::print(&v, "verify")?;
    } else {
        for v in &out {
            match &v.failed {
                None => {
                    println!(
                        "{}: ok, {} partitions{}, xor {} sum {}",
                        v.path.display(),
                        v.partitions,
                        if v.empty_partitions > 0 {
                            format!(" (+{} empty filler partitions)", v.empty_partitions)
                        } else {
                            String::new()
                        },
                        v.keys_xor,
                        v.keys_sum
                    );
                    for w in &v.warnings {
                        println!("{}: warning[{}]: {}", v.path.display(), w.reason, w.message);
                    }
                }
                Some(f) => println!(
                    "{}: FAILED: error[{}]: {}",
                    v.path.display(),
                    f.reason,
                    f.message
                ),
            }
        }
        if out.len() > 1 {
            println!(
                "total: {} partitions, xor {:016x} sum {:016x}",
                total.count, total.xor, total.sum
            );
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[derive(clap::Args)]
pub struct RecoverArgs {
    /// A table directory holding an interrupted `--publish replace`.
    pub table_dir: PathBuf,
    #[arg(long)]
    pub json: bool,
}

pub fn recover(a: RecoverArgs) -> Result<ExitCode> {
    let r = match publish::recover(&a.table_dir) {
        Ok(r) => r,
        Err(e) => return Ok(Failed::from(SplitError::from(e)).print(a.json)),
    };
    if a.json {
        // An object, like every other command's: `{"version": 1, "recovered": [...]}`.
        super::json::print(&r, "recovered")?;
    } else if r.is_empty() {
        println!("{}: no interrupted transaction", a.table_dir.display());
    } else {
        for x in &r {
            println!(
                "{}: {} — removed {}",
                x.log.display(),
                if x.committed {
                    "committed, finished forward"
                } else {
                    "not committed, rolled back"
                },
                x.removed.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct ApplyPendingArgs {
    /// Cassandra's data directory (`data_file_directories`, e.g. /var/lib/cassandra/data),
    /// or one keyspace or table directory under it.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Check everything, change nothing, print what a run would do.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
    /// Exit 0 even when the run is refused or fails, after printing its reason: as an init
    /// container, nothing it does may keep Cassandra from starting. Nothing is published by
    /// a refused run, an interrupted one is finished or rolled back by the next (parent or
    /// children), and the intents wait for the next restart (the job stays AwaitingRestart).
    /// It cannot act when the container never runs: an image that cannot be pulled leaves
    /// the pod Init:ImagePullBackOff and Cassandra not started (docs/runbook.md
    /// CleaveInitContainerBlocksCassandra).
    #[arg(long)]
    pub never_block_start: bool,
    #[command(flatten)]
    pub space: SpaceArg,
}

/// The space pre-flight (`split::space`) of `apply-pending`, on the filesystem of every table
/// with pending intents: publishing writes no data (the children were staged, and checked
/// against the reserve, by the run that pended them; they are hard-linked into place), only
/// transaction logs, so it is refused only where the filesystem is already below the
/// reserve. Nothing pending, nothing checked: an empty volume's first boot is not refused.
/// A scan that fails is left to `run_on_restart`, which reports it.
fn pending_space(a: &ApplyPendingArgs) -> Result<(), SplitError> {
    let Ok(tables) = intent::pending_tables(&a.data_dir) else {
        return Ok(());
    };
    for t in &tables {
        space::preflight(t, 0, a.space.min_free_percent)?;
    }
    Ok(())
}

/// `cleave apply-pending`: publishes the `--publish on-restart` intents under `--data-dir`
/// before Cassandra starts (an init container). Exit 0 when the run finished, whatever the
/// jobs' outcomes (a `ParentChanged` job is recorded, not an error of the run); 1 with
/// `error[<Reason>]` when it refused (`CassandraRunning`, `CassandraMayBeRunning`, `Busy`)
/// or failed, with nothing changed before the failing step.
pub fn apply_pending(a: ApplyPendingArgs) -> Result<ExitCode> {
    let opts = intent::ApplyOptions { dry_run: a.dry_run };
    let r = match pending_space(&a)
        .and_then(|()| intent::run_on_restart(&a.data_dir, &opts).map_err(SplitError::from))
    {
        Ok(r) => r,
        Err(e) => {
            let code = Failed::from(e).print(a.json);
            if a.never_block_start {
                eprintln!("cleave: --never-block-start: Cassandra may start; nothing was published and the intents wait for the next restart (docs/runbook.md \"apply-pending\")");
                return Ok(ExitCode::SUCCESS);
            }
            return Ok(code);
        }
    };
    if a.json {
        super::json::print(&r, "apply")?;
        return Ok(ExitCode::SUCCESS);
    }
    if !r.data_dir_exists {
        println!(
            "{}: nothing pending (no such directory yet: Cassandra creates it at its first start)",
            a.data_dir.display()
        );
    } else if r.jobs.is_empty() && r.stale_staging.is_empty() {
        println!("{}: nothing pending", a.data_dir.display());
    }
    for d in &r.stale_staging {
        let would = if a.dry_run { "would be " } else { "" };
        println!("{}: staging of a killed run {would}removed", d.display());
    }
    for x in &r.recovered {
        println!("{}: interrupted transaction finished", x.log.display());
    }
    for j in &r.jobs {
        match j {
            intent::JobAction::Applied { outcome } | intent::JobAction::WouldApply { outcome } => {
                let would = if a.dry_run { "would be " } else { "" };
                match &outcome.result {
                    intent::OutcomeResult::Complete {
                        parents, children, ..
                    } => println!(
                        "{}: job {} {would}published: {} replaced by {} children",
                        outcome.table_dir.display(),
                        outcome.job_uid,
                        parents.join(", "),
                        children.len()
                    ),
                    intent::OutcomeResult::Failed { reason, message } => println!(
                        "{}: job {} {would}failed[{reason}]: {message}",
                        outcome.table_dir.display(),
                        outcome.job_uid
                    ),
                }
            }
            intent::JobAction::AlreadyDone { job_uid } => {
                println!("job {job_uid}: already applied (outcome recorded)")
            }
            intent::JobAction::LeftAlone {
                dir,
                reason,
                message,
            } => println!("{}: left alone[{reason}]: {message}", dir.display()),
            intent::JobAction::RemovedIncomplete { dir } => {
                println!(
                    "{}: incomplete staging without intent removed",
                    dir.display()
                )
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

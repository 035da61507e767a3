//! `CleanupJob` as a kind of the core: the zero-copy cleanup of `split::cleanup` over the
//! tables of a keyspace, with the owned ranges from the spec or from the node's own ring
//! (management API, `mgmt::ring`).
//!
//! With `ownership: ManagementApi` the ring is read before the first table and again just
//! before each table is published (the engine's gate): if the owned ranges changed in
//! between, or a node started joining, leaving or moving, that table is not published and
//! the job fails `RingChanging` (CASSANDRA-16418's guard, on the sidecar's side).
//!
//! Resuming is re-running: a table already cleaned up has only owned sstables, which a
//! second cleanup keeps as they are.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;

use super::core::{lease, now, restart, Ctx, Ended, Kind, Run, Store};
use super::crd::{
    CleanupJob, CleanupJobSpec, CleanupVerdict, JobStatus, Maintenance, Ownership, PlannedChild,
    Publish, SSTableResult,
};
use super::decide::{self, TableClaim};
use super::job::{self, STAGED_DIR};
use super::schema::SpecProblem;
use super::status::{self, Event};
use super::window;
use crate::mgmt::ring;
use crate::reason::{Failure, Reason};
use crate::split::cleanup::{CleanupOptions, Gate, Verdict};
use crate::split::plan::Policy;
use crate::sstable::{Partitioner, Token, TokenRange};

impl Kind for CleanupJob {
    const KIND: &'static str = "CleanupJob";
    const NOUN: &'static str = "job";

    crate::kind_status_and_node!(node_name);

    fn checks(&self) -> Vec<SpecProblem> {
        let spec = &self.spec;
        let mut v: Vec<SpecProblem> =
            decide::node_label_check(self.labels(), "spec.nodeName", &spec.node_name)
                .into_iter()
                .collect();
        v.extend(decide::name_checks(&spec.keyspace, &spec.tables));
        v.extend(decide::rate_check(spec.max_bytes_per_second));
        v.extend(decide::parallelism_check(spec.parallelism));
        v.extend(decide::target_check(spec.target_cassandra.as_deref()));
        let both = ["spec.ownedRanges", "spec.ownership"];
        let bad = |field: &str, m: &str| SpecProblem::new(field, Reason::InvalidSpec, m);
        match (spec.ownership, spec.owned_ranges.is_empty()) {
            (Ownership::Ranges, true) => v.push(
                bad(
                    "spec.ownedRanges",
                    "is empty: list the ranges this node owns, or set ownership: ManagementApi",
                )
                .about(&both),
            ),
            (Ownership::ManagementApi, false) => v.push(
                bad(
                    "spec.ownedRanges",
                    "is set with ownership: ManagementApi: choose one",
                )
                .about(&both),
            ),
            (Ownership::ManagementApi, true) => {
                // The ring is read from a running Cassandra (the management API asks it over
                // CQL), and Replace needs it stopped: only a window (cleave reads the ring,
                // then stops it) or OnRestart can do both.
                if spec.publish == Publish::Replace && spec.maintenance == Maintenance::None {
                    v.push(bad(
                        "spec.maintenance",
                        "is None with ownership: ManagementApi and publish: Replace, which cannot succeed: the ring is read from a running Cassandra and Replace needs it stopped; set maintenance: ManagementApi (cleave reads the ring, then stops Cassandra) or publish: OnRestart",
                    ).about(&["spec.ownership", "spec.publish"]));
                }
                if spec.partitioner() != Partitioner::Murmur3 {
                    v.push(bad(
                        "spec.ownership",
                        "ManagementApi needs the Murmur3 partitioner (the management API parses tokens as Long); list spec.ownedRanges instead",
                    ).about(&["spec.partitioner"]));
                }
            }
            (Ownership::Ranges, false) => {
                let (parsed, bad) = decide::token_checks(
                    "ownedRanges",
                    &spec.owned_ranges,
                    Some(spec.partitioner()),
                );
                v.extend(bad);
                if let Some(rs) = parsed {
                    v.extend(decide::overlap_check(
                        "ownedRanges",
                        spec.partitioner(),
                        &rs,
                    ));
                }
            }
        }
        v
    }

    fn ttl_seconds_after_finished(&self) -> Option<i64> {
        self.spec.ttl_seconds_after_finished
    }

    fn rate_limit(&self) -> Option<u64> {
        self.spec.max_bytes_per_second
    }

    fn tables(&self, default_data_dir: &Path) -> TableClaim {
        TableClaim {
            data_dir: data_dir(&self.spec, default_data_dir),
            keyspace: self.spec.keyspace.clone(),
            tables: self.spec.tables.clone(),
        }
    }

    /// With `maintenance: ManagementApi` the cleanup runs in one window for all its tables:
    /// the owned ranges are read from the ring before the window opens (a stopped Cassandra
    /// answers no ring query), so the re-read before publishing is the one before the stop.
    async fn work<S: Store>(self: Arc<Self>, ctx: Arc<Ctx<S>>, mut run: Run) {
        let started = Instant::now();
        let mut lease = run.lease(&*ctx, &*self);
        let mut latest = std::mem::take(&mut run.claimed);
        // Before any window: a target this node's Cassandra would misread stops nothing.
        let target =
            job::target_cassandra(self.spec.target_cassandra.as_deref(), ctx.limits.cassandra);
        if let Err(f) = target {
            lease::finish(&mut lease, &run.key, started, &latest, Ended::Failed(f)).await;
            return;
        }
        let windowed = wants_window(&self.spec);
        let owned = match self.owned(&ctx, windowed).await {
            Ok(o) => o,
            Err(f) => {
                // A resumed window whose Cassandra is down cannot answer the ring: start it.
                let f = window::fail_opening(&*self, &ctx, &mut lease, &mut latest, f).await;
                lease::finish(&mut lease, &run.key, started, &latest, Ended::Failed(f)).await;
                return;
            }
        };
        if windowed {
            let d = data_dir(&self.spec, &ctx.data_dir);
            if let Err(f) = window::open(&self, &ctx, &mut lease, &mut latest, &d).await {
                lease::finish(&mut lease, &run.key, started, &latest, Ended::Failed(f)).await;
                return;
            }
        }
        let deadline = windowed
            .then(|| window::deadline_of(ctx.window.as_ref(), &latest))
            .flatten();
        let mut ended = match self
            .clean(&ctx, &mut run, &mut lease, &mut latest, owned, deadline)
            .await
        {
            Ok(e) => e,
            Err(f) => Ended::Failed(f),
        };
        if self.spec.publish == Publish::OnRestart {
            let d = data_dir(&self.spec, &ctx.data_dir);
            let dirs =
                job::table_dirs_of(&d, &self.spec.keyspace, &self.spec.tables).unwrap_or_default();
            // Only a table with something to drop has an intent.
            let recorded = latest
                .results
                .iter()
                .any(|r| r.verdict != Some(CleanupVerdict::Kept));
            let uid = restart::job_uid(&*self);
            ended = job::end_on_restart(dirs, uid, &self.spec.node_name, ended, recorded).await;
        }
        if windowed {
            ended = window::end(&*self, &ctx, &mut lease, &mut latest, ended).await;
        }
        lease::finish(&mut lease, &run.key, started, &latest, ended).await;
    }

    /// Removes this job's staging directories (Stage) and the intents of an `OnRestart` not
    /// yet applied (so the next restart does not publish a deleted job): children already
    /// published stay.
    async fn close_window<S: Store>(self: Arc<Self>, ctx: Arc<Ctx<S>>) -> bool {
        window::close_finished(self, ctx).await
    }

    async fn cleanup<S: Store>(self: Arc<Self>, ctx: Arc<Ctx<S>>, _stopped: bool) -> String {
        let d = data_dir(&self.spec, &ctx.data_dir);
        let (name, spec) = (self.name_any(), self.spec.clone());
        let uid = restart::job_uid(&*self);
        let r = tokio::task::spawn_blocking(move || {
            let dirs = job::table_dirs_of(&d, &spec.keyspace, &spec.tables).unwrap_or_default();
            job::recover_leftovers(&dirs, &name)?;
            for t in &dirs {
                let staged = t.join(STAGED_DIR).join(&name);
                if staged.is_dir() {
                    std::fs::remove_dir_all(&staged)
                        .map_err(|e| Failure::io(staged.display(), &e))?;
                }
            }
            job::withdraw_intents(&dirs, &uid)
        })
        .await;
        match r {
            Ok(Ok(())) => "leftovers of this job removed".to_string(),
            Ok(Err(f)) => format!("cleanup incomplete: {f}"),
            Err(e) => format!("cleanup incomplete: its task failed: {e}"),
        }
    }
}

impl window::Windowed for CleanupJob {
    fn window_spec(&self) -> window::WindowSpec<'_> {
        window::WindowSpec {
            keyspace: &self.spec.keyspace,
            tables: &self.spec.tables,
            max_downtime_seconds: self.spec.max_downtime_seconds,
        }
    }

    /// Every sstable of the tables: any of them may be split (its verdict is known only
    /// once its index is read), so the prediction counts them all.
    fn window_plan(
        &self,
        data_dir: &Path,
        _status: &JobStatus,
    ) -> Result<(Vec<PathBuf>, Vec<PathBuf>), Failure> {
        let dirs = job::table_dirs_of(data_dir, &self.spec.keyspace, &self.spec.tables)?;
        let mut todo = Vec::new();
        for d in &dirs {
            let rd = std::fs::read_dir(d).map_err(|e| Failure::io(d.display(), &e))?;
            for e in rd.filter_map(|e| e.ok()) {
                if matches!(
                    crate::sstable::Descriptor::from_path(&e.path()),
                    Ok((_, crate::sstable::Component::Data))
                ) {
                    todo.push(e.path());
                }
            }
        }
        todo.sort();
        Ok((dirs, todo))
    }
}

/// `publish: Replace` with `maintenance: ManagementApi`, for real.
fn wants_window(spec: &CleanupJobSpec) -> bool {
    spec.publish == Publish::Replace
        && spec.maintenance == Maintenance::ManagementApi
        && !spec.dry_run
}

fn data_dir(spec: &CleanupJobSpec, default: &Path) -> PathBuf {
    decide::data_dir(spec.data_directory.as_deref(), default)
}

/// `spec.ownedRanges` as the engine takes them.
fn parse_ranges(spec: &CleanupJobSpec) -> Result<Vec<TokenRange>, Failure> {
    decide::parse_token_ranges("ownedRanges", &spec.owned_ranges, spec.partitioner())
}

fn to_token_ranges(rs: &[ring::Range]) -> Vec<TokenRange> {
    rs.iter()
        .map(|&(a, b)| TokenRange::new(Token::Murmur3(a), Token::Murmur3(b)))
        .collect()
}

/// The node's owned ranges now, from its management API.
async fn read_ring(api: &crate::mgmt::Client, keyspace: &str) -> Result<Vec<ring::Range>, Failure> {
    let endpoints = api.endpoints().await?;
    let map = api.range_to_endpoint(keyspace).await?;
    ring::owned_ranges(&endpoints, &map)
}

impl CleanupJob {
    /// The owned ranges, and with `ownership: ManagementApi` the gate that reads the ring
    /// again before each table is published (none in a window: Cassandra is stopped then).
    async fn owned<S: Store>(
        &self,
        ctx: &Arc<Ctx<S>>,
        windowed: bool,
    ) -> Result<(Vec<TokenRange>, Option<Gate>), Failure> {
        let spec = &self.spec;
        Ok(match spec.ownership {
            Ownership::Ranges => (parse_ranges(spec)?, None),
            Ownership::ManagementApi => {
                let Some(api) = ctx.window.clone() else {
                    return Err(Failure::new(
                        Reason::InvalidSpec,
                        "ownership: ManagementApi needs the sidecar's --management-api; nothing was done",
                    ));
                };
                let first = read_ring(&api.client, &spec.keyspace).await?;
                if first.is_empty() {
                    return Err(Failure::new(
                        Reason::InvalidRequest,
                        format!("the ring gives this node no range of keyspace {}: refusing to drop every sstable", spec.keyspace),
                    ));
                }
                let (client, ks, expect) =
                    (api.client.clone(), spec.keyspace.clone(), first.clone());
                let handle = tokio::runtime::Handle::current();
                // Called on the blocking thread just before each table is published.
                let gate = Gate(Arc::new(move || {
                    let now = handle.block_on(read_ring(&client, &ks))?;
                    if now != expect {
                        return Err(Failure::new(
                            Reason::RingChanging,
                            format!("this node's ranges changed while the cleanup ran ({} ranges, now {}): nothing of this table was published", expect.len(), now.len()),
                        ));
                    }
                    Ok(())
                }));
                (to_token_ranges(&first), (!windowed).then_some(gate))
            }
        })
    }

    async fn clean<S: Store>(
        &self,
        ctx: &Arc<Ctx<S>>,
        run: &mut Run,
        lease: &mut lease::Lease<'_, S, CleanupJob>,
        latest: &mut JobStatus,
        (owned, gate): (Vec<TokenRange>, Option<Gate>),
        deadline: Option<i64>,
    ) -> Result<Ended, Failure> {
        let spec = self.spec.clone();
        let d = data_dir(&spec, &ctx.data_dir);
        let dirs = job::table_dirs_of(&d, &spec.keyspace, &spec.tables)?;
        let name = self.name_any();
        let uid = restart::job_uid(self);
        let throttle = spec
            .max_bytes_per_second
            .map(|r| Arc::new(crate::io::throttle::TokenBucket::new(r)));
        let target = job::target_cassandra(spec.target_cassandra.as_deref(), ctx.limits.cassandra)?;
        let metrics = ctx.metrics.clone();
        let cancel = run.cancel.clone();
        let tables = dirs.len();
        // A window's Replace deadline: checked before each table (the engine's cleanup of
        // one table is not interrupted), and before the first (a sidecar resumed late).
        let mut hit = deadline.is_some_and(|d| now() >= d);
        if hit {
            cancel.store(true, Ordering::Relaxed);
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<JobStatus>();
        let mut st = latest.clone();
        st.results.clear();
        st.progress.sstables_done = 0;
        let task = tokio::task::spawn_blocking(move || {
            job::recover_leftovers(&dirs, &name)?;
            let mut cancelled = false;
            for t in &dirs {
                if cancel.load(Ordering::Relaxed) {
                    cancelled = true;
                    break;
                }
                let out_dir = match spec.publish {
                    // The table directory: the engine's default for both.
                    Publish::Replace | Publish::OnRestart => None,
                    Publish::Stage => {
                        let o = job::staged_dir(t, &name)?;
                        if o.is_dir() {
                            // A run killed before recording this table: stage it again.
                            std::fs::remove_dir_all(&o)
                                .map_err(|e| Failure::io(o.display(), &e))?;
                        }
                        std::fs::create_dir_all(&o).map_err(|e| Failure::io(o.display(), &e))?;
                        Some(o)
                    }
                };
                let opts = CleanupOptions {
                    policy: Policy {
                        throttle: throttle.clone(),
                        target,
                        ..Policy::default()
                    },
                    publish: spec.publish,
                    out_dir: out_dir.clone(),
                    dry_run: spec.dry_run,
                    gate: gate.clone(),
                    job_uid: Some(uid.clone()),
                    parallelism: spec.parallelism.unwrap_or(1) as usize,
                    // The CleanupJob has had no space pre-flight; giving it one is a
                    // behaviour change of the operator, left for its own issue.
                    min_free_percent: None,
                };
                if spec.publish == Publish::Replace && !spec.dry_run {
                    job::check_replace(std::slice::from_ref(t))?;
                }
                let report = match crate::split::cleanup::cleanup(t, &owned, &opts) {
                    Ok(r) => r,
                    Err(e) => {
                        if let Some(o) = &out_dir {
                            let _ = std::fs::remove_dir_all(o);
                        }
                        return Err(Failure::from(e));
                    }
                };
                for s in &report.sstables {
                    let verdict = match s.verdict {
                        Verdict::Kept => CleanupVerdict::Kept,
                        Verdict::Dropped => CleanupVerdict::Dropped,
                        Verdict::Split => CleanupVerdict::Split,
                    };
                    metrics
                        .cleanup_sstables
                        .with_label_values(&[verdict_label(verdict)])
                        .inc();
                    st.results.push(SSTableResult {
                        parent: s.path.to_string_lossy().to_string(),
                        children: s
                            .children
                            .iter()
                            .map(|c| c.path.to_string_lossy().to_string())
                            .collect(),
                        layout: s
                            .children
                            .first()
                            .map(|c| format!("{:?}", c.layout).to_lowercase()),
                        fallback_reason: s
                            .children
                            .iter()
                            .find_map(|c| c.fallback.as_ref().map(|f| f.to_string())),
                        bytes_shared: s.bytes_shared,
                        bytes_copied: s.bytes_copied,
                        bytes_reencoded: s.bytes_reencoded,
                        partitions: s.partitions,
                        verdict: Some(verdict),
                        planned: s.plan.iter().map(PlannedChild::of).collect(),
                    });
                    st.progress.bytes_shared += s.bytes_shared;
                    st.progress.bytes_copied += s.bytes_copied;
                    st.progress.bytes_reencoded += s.bytes_reencoded;
                    st.progress.partitions += s.partitions;
                }
                // A dry run's is a prediction: nothing was reclaimed.
                if !report.dry_run {
                    metrics.cleanup_reclaimed.inc_by(report.bytes_reclaimed);
                }
                st.progress.sstables_done += report.sstables.len() as u64;
                st.progress.sstables_total = st.progress.sstables_done;
                st.progress.summary = format!(
                    "{} kept, {} dropped, {} split",
                    count(&st, CleanupVerdict::Kept),
                    count(&st, CleanupVerdict::Dropped),
                    count(&st, CleanupVerdict::Split)
                );
                let _ = tx.send(st.clone());
            }
            Ok::<_, Failure>((cancelled, st))
        });
        let mut task = std::pin::pin!(task);
        let mut beat = tokio::time::interval(ctx.heartbeat);
        beat.tick().await;
        let generation = self.metadata.generation;
        let mut deadline_passed = std::pin::pin!(window::until(deadline));
        let joined = loop {
            tokio::select! {
                r = &mut task => break r,
                _ = &mut deadline_passed, if !hit => {
                    tracing::warn!("the maintenance window's Replace deadline passed: stopping after the current table");
                    hit = true;
                    run.cancel.store(true, Ordering::Relaxed);
                }
                Some(s) = rx.recv() => {
                    *latest = status::next(latest, Event::Progress { identity: &ctx.identity, progress: &s.progress, results: &s.results }, generation, now()).status;
                    lease.write(latest).await;
                }
                _ = beat.tick() => {
                    *latest = status::next(latest, Event::Heartbeat { identity: &ctx.identity }, generation, now()).status;
                    lease.write(latest).await;
                }
            }
            if lease.lost {
                run.cancel.store(true, Ordering::Relaxed);
            }
        };
        let (cancelled, st) = joined.map_err(|e| {
            Failure::new(
                Reason::IoError,
                format!("the job's worker thread failed: {e}"),
            )
        })??;
        *latest = status::next(
            latest,
            Event::Progress {
                identity: &ctx.identity,
                progress: &st.progress,
                results: &st.results,
            },
            generation,
            now(),
        )
        .status;
        if cancelled && hit {
            let done = st
                .results
                .iter()
                .map(|r| &r.parent)
                .filter_map(|p| Path::new(p).parent())
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            return Err(Failure::new(
                Reason::DowntimeExceeded,
                format!("the cleanup was stopped between two tables at drainedAt + maxDowntimeSeconds − the start allowance, to leave Cassandra its start within the budget; {done} of {tables} tables are cleaned, the others untouched. Run the job again for the rest"),
            ));
        }
        Ok(match (cancelled, self.spec.dry_run) {
            (true, _) => Ended::Interrupted,
            (false, true) => Ended::Planned,
            (false, false) => Ended::Complete,
        })
    }
}

fn count(st: &JobStatus, v: CleanupVerdict) -> usize {
    st.results.iter().filter(|r| r.verdict == Some(v)).count()
}

pub fn verdict_label(v: CleanupVerdict) -> &'static str {
    match v {
        CleanupVerdict::Kept => "kept",
        CleanupVerdict::Dropped => "dropped",
        CleanupVerdict::Split => "split",
    }
}

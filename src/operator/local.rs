//! `cleave run --local DIR`: the same reconcilers over a directory of manifests. Each
//! `*.yaml` holding an AnticompactionJob or RangeStream is a resource; its status is
//! written beside it as `<name>.status.yaml`, events are appended to `events.log`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;

use kube::Resource;
use tracing::{error, info, warn};

use super::crd::{AnticompactionJob, JobStatus, RangeStream};
use super::reconcile::{self, Ctx, OperatorError, Store};
use super::status::Note;

pub struct LocalStore {
    pub dir: PathBuf,
}

fn status_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.status.yaml"))
}

fn write_atomic(path: &Path, text: &str) -> Result<(), OperatorError> {
    let tmp = path.with_extension("yaml.tmp");
    std::fs::write(&tmp, text)
        .map_err(|e| OperatorError::Store(format!("{}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| OperatorError::Store(format!("{}: {e}", path.display())))
}

impl LocalStore {
    fn write_status(&self, name: &str, status: &JobStatus) -> Result<(), OperatorError> {
        let text =
            serde_saphyr::to_string(status).map_err(|e| OperatorError::Store(e.to_string()))?;
        write_atomic(&status_path(&self.dir, name), &text)
    }
}

impl Store for LocalStore {
    /// No resourceVersion here: one sidecar owns a manifest directory.
    async fn patch_status(
        &self,
        job: &AnticompactionJob,
        status: &JobStatus,
        _expect: Option<&str>,
    ) -> Result<Option<String>, OperatorError> {
        self.write_status(&job.name_any(), status)?;
        Ok(None)
    }

    async fn get(
        &self,
        job: &AnticompactionJob,
    ) -> Result<Option<AnticompactionJob>, OperatorError> {
        let name = job.name_any();
        for (p, _) in manifests(&self.dir)? {
            if let Some(mut j) = read_job(&p) {
                with_local_meta(&mut j, &p);
                if j.name_any() == name {
                    j.status = load_status(&self.dir, &name);
                    return Ok(Some(j));
                }
            }
        }
        Ok(None)
    }

    async fn patch_stream_status(
        &self,
        s: &RangeStream,
        status: &JobStatus,
        _expect: Option<&str>,
    ) -> Result<Option<String>, OperatorError> {
        self.write_status(&s.name_any(), status)?;
        Ok(None)
    }

    async fn get_stream(&self, s: &RangeStream) -> Result<Option<RangeStream>, OperatorError> {
        let name = s.name_any();
        for (p, kind) in manifests(&self.dir)? {
            if kind != "RangeStream" {
                continue;
            }
            let Some(mut x) = std::fs::read_to_string(&p)
                .ok()
                .and_then(|t| serde_saphyr::from_str::<RangeStream>(&t).ok())
            else {
                continue;
            };
            with_local_meta(&mut x, &p);
            if x.name_any() == name {
                x.status = load_status(&self.dir, &name);
                return Ok(Some(x));
            }
        }
        Ok(None)
    }

    async fn delete(&self, job: &AnticompactionJob) -> Result<(), OperatorError> {
        let name = job.name_any();
        for (p, _) in manifests(&self.dir)? {
            if p.file_stem().and_then(|s| s.to_str()) == Some(name.as_str())
                || read_job(&p).is_some_and(|j| j.name_any() == name)
            {
                std::fs::remove_file(&p)
                    .map_err(|e| OperatorError::Store(format!("{}: {e}", p.display())))?;
            }
        }
        let _ = std::fs::remove_file(status_path(&self.dir, &name));
        Ok(())
    }

    async fn event<K>(&self, obj: &K, note: &Note)
    where
        K: Resource<DynamicType = ()> + Sync,
    {
        let line = format!(
            "{} {:?} {} {}: {}\n",
            super::decide::now_rfc3339(),
            note.type_,
            obj.meta().name.as_deref().unwrap_or_default(),
            note.reason,
            note.message
        );
        info!(kind = %K::kind(&()), name = obj.meta().name.as_deref().unwrap_or_default(), reason = %note.reason, detail = %note.message, "event");
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("events.log"))
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// Manifest files (`*.yaml`, not our `.status.yaml`) and their `kind`.
fn manifests(dir: &Path) -> Result<Vec<(PathBuf, String)>, OperatorError> {
    let mut v = Vec::new();
    let rd = std::fs::read_dir(dir)
        .map_err(|e| OperatorError::Store(format!("{}: {e}", dir.display())))?;
    for e in rd.filter_map(|e| e.ok()) {
        let p = e.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !(name.ends_with(".yaml") || name.ends_with(".yml")) || name.ends_with(".status.yaml") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        let kind = serde_saphyr::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["kind"].as_str().map(str::to_string))
            .unwrap_or_default();
        v.push((p, kind));
    }
    v.sort();
    Ok(v)
}

fn read_job(p: &Path) -> Option<AnticompactionJob> {
    serde_saphyr::from_str(&std::fs::read_to_string(p).ok()?).ok()
}

fn with_local_meta<K: kube::Resource>(obj: &mut K, file: &Path) {
    let m = obj.meta_mut();
    if m.name.is_none() {
        m.name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string);
    }
    m.namespace.get_or_insert_with(|| "local".into());
    m.generation.get_or_insert(1);
}

fn load_status(dir: &Path, name: &str) -> Option<JobStatus> {
    serde_saphyr::from_str(&std::fs::read_to_string(status_path(dir, name)).ok()?).ok()
}

/// One pass over the directory; returns how many of this node's jobs are not finished.
pub async fn pass(ctx: &Arc<Ctx<LocalStore>>) -> Result<usize, OperatorError> {
    let dir = ctx.store.dir.clone();
    let mut open = 0;
    for (p, kind) in manifests(&dir)? {
        let text = std::fs::read_to_string(&p)
            .map_err(|e| OperatorError::Store(format!("{}: {e}", p.display())))?;
        match kind.as_str() {
            "AnticompactionJob" => {
                let mut job: AnticompactionJob = match serde_saphyr::from_str(&text) {
                    Ok(j) => j,
                    Err(e) => {
                        warn!(file = %p.display(), error = %e, "not a valid AnticompactionJob");
                        continue;
                    }
                };
                with_local_meta(&mut job, &p);
                job.status = load_status(&dir, &job.name_any());
                if job.spec.node_name != ctx.node {
                    continue;
                }
                let _ = reconcile::reconcile_job(Arc::new(job.clone()), ctx.clone()).await?;
                if !super::decide::is_finished(load_status(&dir, &job.name_any()).as_ref()) {
                    open += 1;
                }
            }
            "RangeStream" => {
                let mut s: RangeStream = match serde_saphyr::from_str(&text) {
                    Ok(s) => s,
                    Err(e) => {
                        warn!(file = %p.display(), error = %e, "not a valid RangeStream");
                        continue;
                    }
                };
                with_local_meta(&mut s, &p);
                s.status = load_status(&dir, &s.name_any());
                let mine = s.spec.source_node == ctx.node;
                let name = s.name_any();
                reconcile::reconcile_stream(Arc::new(s), ctx.clone()).await?;
                // `--once` waits for this node's streams too (the sender runs on a task).
                if mine && !super::decide::is_finished(load_status(&dir, &name).as_ref()) {
                    open += 1;
                }
            }
            _ => {}
        }
    }
    Ok(open)
}

/// Runs passes every `interval` until shutdown, or (with `once`) until every job of this
/// node has finished.
pub async fn run(
    ctx: Arc<Ctx<LocalStore>>,
    interval: Duration,
    once: bool,
) -> Result<(), OperatorError> {
    ctx.metrics
        .ready
        .store(true, std::sync::atomic::Ordering::Relaxed);
    loop {
        let open = match pass(&ctx).await {
            Ok(n) => n,
            Err(e) => {
                ctx.metrics
                    .reconcile_errors
                    .with_label_values(&["AnticompactionJob", e.label()])
                    .inc();
                error!(error = %e, "local pass failed");
                1
            }
        };
        if (once && open == 0) || reconcile::shutdown_requested(&ctx) {
            ctx.runs.cancel_all();
            ctx.runs.wait_idle(Duration::from_secs(3600)).await;
            return Ok(());
        }
        tokio::time::sleep(interval).await;
    }
}

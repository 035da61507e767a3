//! `cleave run --local DIR`: the same reconcilers over a directory of manifests. Each
//! `*.yaml` holding an AnticompactionJob or RangeStream is a resource; its status is
//! written beside it as `<name>.status.yaml`, events are appended to `events.log`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use tracing::{error, info, warn};

use super::core::{self, Ctx, Kind, OperatorError, Store};
use super::crd::{AnticompactionJob, CleanupJob, JobStatus, RangeStream};
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

impl LocalStore {
    /// Every manifest of kind `K` in the directory, with its name, namespace and stored
    /// status filled in as the apiserver would.
    fn load<K: Kind>(&self) -> Result<Vec<(PathBuf, K)>, OperatorError> {
        let mut v = Vec::new();
        for (p, kind) in manifests(&self.dir)? {
            if kind != K::KIND {
                continue;
            }
            let text = std::fs::read_to_string(&p)
                .map_err(|e| OperatorError::Store(format!("{}: {e}", p.display())))?;
            let mut obj: K = match serde_saphyr::from_str(&text) {
                Ok(o) => o,
                Err(e) => {
                    warn!(file = %p.display(), error = %e, "not a valid {}", K::KIND);
                    continue;
                }
            };
            with_local_meta(&mut obj, &p);
            obj.set_status(load_status(&self.dir, &obj.name_any()));
            v.push((p, obj));
        }
        Ok(v)
    }
}

impl Store for LocalStore {
    /// No resourceVersion here: one sidecar owns a manifest directory.
    async fn patch_status<K: Kind>(
        &self,
        obj: &K,
        status: &JobStatus,
        _expect: Option<&str>,
    ) -> Result<Option<String>, OperatorError> {
        self.write_status(&obj.name_any(), status)?;
        Ok(None)
    }

    async fn get<K: Kind>(&self, obj: &K) -> Result<Option<K>, OperatorError> {
        let name = obj.name_any();
        Ok(self
            .load::<K>()?
            .into_iter()
            .map(|(_, o)| o)
            .find(|o| o.name_any() == name))
    }

    async fn delete<K: Kind>(&self, obj: &K) -> Result<(), OperatorError> {
        let name = obj.name_any();
        for (p, o) in self.load::<K>()? {
            if o.name_any() == name {
                std::fs::remove_file(&p)
                    .map_err(|e| OperatorError::Store(format!("{}: {e}", p.display())))?;
            }
        }
        let _ = std::fs::remove_file(status_path(&self.dir, &name));
        Ok(())
    }

    async fn event<K: Kind>(&self, obj: &K, note: &Note) {
        let line = format!(
            "{} {:?} {} {}: {}\n",
            super::decide::now_rfc3339(),
            note.type_,
            obj.meta().name.as_deref().unwrap_or_default(),
            note.reason,
            note.message
        );
        info!(kind = K::KIND, name = obj.meta().name.as_deref().unwrap_or_default(), reason = %note.reason, detail = %note.message, "event");
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("events.log"))
        {
            // events.log is a convenience beside the status files; a failed append loses
            // one line of it, never a status.
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

/// One pass of one kind; returns how many of this node's resources are not finished.
async fn pass_kind<K: Kind>(ctx: &Arc<Ctx<LocalStore>>) -> Result<usize, OperatorError> {
    let mut open = 0;
    for (_, obj) in ctx.store.load::<K>()? {
        if obj.acting_node() != ctx.node {
            continue;
        }
        let name = obj.name_any();
        core::reconcile(Arc::new(obj), ctx.clone()).await?;
        // `--once` waits for the executions it spawned (they run on tasks of their own).
        if !super::decide::is_finished(load_status(&ctx.store.dir, &name).as_ref()) {
            open += 1;
        }
    }
    Ok(open)
}

/// One pass over the directory; returns how many of this node's resources are not finished.
pub async fn pass(ctx: &Arc<Ctx<LocalStore>>) -> Result<usize, OperatorError> {
    Ok(pass_kind::<AnticompactionJob>(ctx).await?
        + pass_kind::<RangeStream>(ctx).await?
        + pass_kind::<CleanupJob>(ctx).await?)
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
                    .with_label_values(&["local", e.label()])
                    .inc();
                error!(error = %e, "local pass failed");
                1
            }
        };
        if (once && open == 0) || ctx.shutdown_requested() {
            ctx.runs.cancel_all();
            ctx.runs.wait_idle(Duration::from_secs(3600)).await;
            return Ok(());
        }
        tokio::time::sleep(interval).await;
    }
}

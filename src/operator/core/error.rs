//! The operator's own errors (not a job's failure: those are `crate::reason::Failure` in
//! status). Each variant is the `error` label of `cleave_reconcile_errors_total`.

/// What made a reconcile fail; the controller retries it with backoff.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Adding or removing our finalizer failed; the source is kept (kube-runtime's error,
    /// which holds the reconcile's own error when that is what failed).
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<OperatorError>>),
    /// The finalizer list kept changing under a removal.
    #[error("finalizer {finalizer} not removed from {name}: the finalizer list kept changing")]
    FinalizerContended { finalizer: String, name: String },
    #[error("resource store: {0}")]
    Store(String),
    #[error("worker task: {0}")]
    Task(String),
}

impl OperatorError {
    pub fn label(&self) -> &'static str {
        match self {
            OperatorError::Kube(_) => "kube",
            OperatorError::Finalizer(_) | OperatorError::FinalizerContended { .. } => "finalizer",
            OperatorError::Store(_) => "store",
            OperatorError::Task(_) => "task",
        }
    }

    /// The apiserver refused a write whose resourceVersion precondition no longer holds.
    pub fn is_conflict(&self) -> bool {
        matches!(self, OperatorError::Kube(kube::Error::Api(s)) if s.code == 409)
    }
}

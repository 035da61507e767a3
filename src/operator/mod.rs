//! The Kubernetes side: CRD types, the reconcilers and what they decide, the resource stores
//! (the Kubernetes API or a directory of manifests), metrics and HTTP endpoints.

pub mod controller;
pub mod crd;
pub mod decide;
pub mod job;
pub mod local;
pub mod metrics;
pub mod reconcile;
pub mod status;
pub mod stream;
pub mod validate_cli;

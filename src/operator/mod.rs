//! The Kubernetes side: the operator core (one for every kind), the kinds that plug into it
//! (`anticompaction`, `stream`), the CRD types, what they decide, the stores (the
//! Kubernetes API in `controller`, a directory of manifests in `local`), metrics and
//! HTTP endpoints.

pub mod anticompaction;
pub mod cleanup;
pub mod controller;
pub mod core;
pub mod crd;
pub mod datacenter;
pub mod decide;
pub mod job;
pub mod local;
pub mod metrics;
pub mod release;
pub mod schema;
pub mod status;
pub mod stream;
pub mod validate_cli;
pub mod window;

//! The operator core, one for every kind:
//!
//! ```text
//! route (this node's?) → decide (validate, TTL, lease; pure) → apply (fail, wait, delete,
//! or claim the lease and spawn the kind's work) → record (status, Event, metrics)
//! ```
//!
//! A kind brings only what is its own through [`Kind`]: its spec checks, the tables it
//! holds, its work and the cleanup of its leftovers. Everything else — the finalizer and the
//! error policy (`controller.rs`), the lease ([`lease`]), the runs of this sidecar
//! ([`runs`]), the phase and failure metrics ([`observe`]), TTL, Events — is written once
//! here, over a [`Store`] that is the Kubernetes API or a directory of manifests.

pub mod ctx;
pub mod error;
pub mod kind;
pub mod lease;
pub mod observe;
pub mod reconcile;
pub mod restart;
pub mod runs;
pub mod store;

pub use ctx::{identity, now, Ctx};
pub use error::OperatorError;
pub use kind::{key_of, Ended, Kind, Run};
pub use lease::Lease;
pub use reconcile::reconcile;
pub use runs::{Blocked, Runs};
pub use store::Store;

#[cfg(test)]
mod tests;

//! `DatacenterCleanup` (issue 35): a whole datacenter's cleanup after a scale-up, rack by
//! rack, from one resource. The cluster-scoped side of cleave (`cleave run --cluster`, one
//! leader among its replicas) turns it into the per-node CleanupJobs the node sidecars
//! already execute, and into cass-operator CassandraTask restarts of each staged rack.
//! Nothing here touches a node's files.

pub mod controller;
pub mod crd;
pub mod decide;
pub mod leader;
pub mod scale_up;

//! The stable reason of every failure cleave reports.
//!
//! One vocabulary for the three places a failure is seen: the CLI (`error[Reason]: …` and
//! `{"error": {"reason": …}}` with `--json`), the `reason` of a CR's `Failed` condition, and
//! the `reason` label of the failure metrics. A reason is a fact carried by a type
//! (`reason()` on each step's error enum), never recovered by matching a message. Names are
//! UpperCamelCase because Kubernetes condition reasons must be (metav1.Condition: "CamelCase").
//!
//! Append-only: a reason that reached a dashboard or an alert keeps its spelling forever.

use std::fmt;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Reason {
    /// A component fails a check: a checksum, an order, a length, a field out of range.
    CorruptSSTable,
    /// A well-formed sstable that uses something cleave does not handle (a BTI version other than `da`, an unknown compressor, `la`, …).
    UnsupportedSSTable,
    /// The request itself is wrong: boundaries, ranges, options, a manifest field.
    InvalidRequest,
    /// ENOSPC / EDQUOT, or a pre-flight that predicts it.
    InsufficientSpace,
    /// EACCES / EPERM on a file cleave must read or write.
    PermissionDenied,
    /// A process holds the table's files: Replace would race Cassandra.
    CassandraRunning,
    /// cleave cannot see the node's processes, so it cannot rule out a live Cassandra.
    CassandraMayBeRunning,
    /// The children do not add up to the parent, or a child fails its re-check.
    CheckFailed,
    /// Another cleave holds the table (or the output directory).
    Busy,
    /// Any other I/O error (EIO, a vanished file, …).
    IoError,
    /// A stream request without the right bearer token or client certificate.
    Unauthorized,
    /// The stream receiver is at its concurrent-transfer limit (HTTP 429; retried).
    TooManyTransfers,
    /// The stream receiver cannot be reached (refused, reset, timed out) after the retries.
    Unreachable,
    /// The receiver's import command (`--stream-import-command`) failed.
    ImportFailed,
    /// A resource's spec is wrong (an empty, unknown or contradictory field): fix the manifest.
    InvalidSpec,
    /// The repair markers of a spec are wrong: not exactly one of repairedAt and pendingRepair, a bad UUID.
    InvalidRepairMetadata,
    /// A token range of a spec does not parse for the table's partitioner, or ranges overlap.
    InvalidRange,
    /// Another job or stream of this node works on the same table (it waits, then runs).
    TableBusy,
    /// `--max-concurrent-jobs` runs already hold this node (it waits, then runs).
    ConcurrencyLimit,
    /// A parent sstable is no longer what an intent recorded (compacted away, replaced, changed).
    ParentChanged,
    /// A stream transfer reached a receiver that is not its destination node (HTTP 421).
    WrongDestination,
    /// The table has a secondary index or SAI whose files would go stale.
    SecondaryIndexPresent,
    /// A node of the ring is joining, leaving or moving: ownership is not settled.
    RingChanging,
    /// Cassandra did not start again (or become ready) after a maintenance window.
    CassandraStartFailed,
    /// The keyspace has no directory under the data directory.
    KeyspaceNotFound,
    /// A table the spec names has no directory under its keyspace.
    TableNotFound,
    /// An sstable the spec names is in none of the tables.
    SSTableNotFound,
    /// The cluster could not lose this node now: the management API's cluster probe failed at LOCAL_QUORUM for the keyspace's replication factor.
    ClusterUnavailable,
    /// A maintenance window would last (or lasted) longer than `maxDowntimeSeconds`.
    DowntimeExceeded,
    /// The management API could not be reached, or answered a call with a status its OpenAPI document does not give for success.
    ManagementApiFailed,
    /// An `OnRestart` job's intent and staged children are gone from the data volume before `apply-pending` published them (removed by hand, or the volume replaced): nothing was published.
    PendingLost,
    /// A DatacenterCleanup's CassandraTask `restart` of a rack failed (cass-operator's condition or pod counts say so): no further rack starts.
    RestartFailed,
    /// A DatacenterCleanup names a CassandraDatacenter that does not exist in its namespace, or one with no Cassandra pods.
    DatacenterNotFound,
}

impl Reason {
    /// What it means, from its doc comment (the reasons table of docs/operator.md).
    pub fn doc(self) -> &'static str {
        match self {
            Reason::CorruptSSTable => "A component fails a check: a checksum, an order, a length, a field out of range.",
            Reason::UnsupportedSSTable => "A well-formed sstable that uses something cleave does not handle (a BTI version other than `da`, an unknown compressor, `la`, …).",
            Reason::InvalidRequest => "The request itself is wrong: boundaries, ranges, options, a manifest field.",
            Reason::InsufficientSpace => "ENOSPC / EDQUOT, or a pre-flight that predicts it.",
            Reason::PermissionDenied => "EACCES / EPERM on a file cleave must read or write.",
            Reason::CassandraRunning => "A process holds the table's files: Replace would race Cassandra.",
            Reason::CassandraMayBeRunning => "cleave cannot see the node's processes, so it cannot rule out a live Cassandra.",
            Reason::CheckFailed => "The children do not add up to the parent, or a child fails its re-check.",
            Reason::Busy => "Another cleave holds the table (or the output directory).",
            Reason::IoError => "Any other I/O error (EIO, a vanished file, …).",
            Reason::Unauthorized => "A stream request without the right bearer token or client certificate.",
            Reason::TooManyTransfers => "The stream receiver is at its concurrent-transfer limit (HTTP 429; retried).",
            Reason::Unreachable => "The stream receiver cannot be reached (refused, reset, timed out) after the retries.",
            Reason::ImportFailed => "The receiver's import command (`--stream-import-command`) failed.",
            Reason::InvalidSpec => "A resource's spec is wrong (an empty, unknown or contradictory field): fix the manifest.",
            Reason::InvalidRepairMetadata => "The repair markers of a spec are wrong: not exactly one of repairedAt and pendingRepair, a bad UUID.",
            Reason::InvalidRange => "A token range of a spec does not parse for the table's partitioner, or ranges overlap.",
            Reason::TableBusy => "Another job or stream of this node works on the same table (it waits, then runs).",
            Reason::ConcurrencyLimit => "`--max-concurrent-jobs` runs already hold this node (it waits, then runs).",
            Reason::PendingLost => "An `OnRestart` job's intent and staged children are gone from the data volume before `apply-pending` published them (removed by hand, or the volume replaced): nothing was published.",
            Reason::ParentChanged => "A parent sstable is no longer what an intent recorded (compacted away, replaced, changed).",
            Reason::WrongDestination => "A stream transfer reached a receiver that is not its destination node (HTTP 421).",
            Reason::SecondaryIndexPresent => "The table has a secondary index or SAI whose files would go stale.",
            Reason::RingChanging => "A node of the ring is joining, leaving or moving: ownership is not settled.",
            Reason::CassandraStartFailed => "Cassandra did not start again (or become ready) after a maintenance window.",
            Reason::KeyspaceNotFound => "The keyspace has no directory under the data directory.",
            Reason::TableNotFound => "A table the spec names has no directory under its keyspace.",
            Reason::SSTableNotFound => "An sstable the spec names is in none of the tables.",
            Reason::ClusterUnavailable => "The cluster could not lose this node now: the management API's cluster probe failed at LOCAL_QUORUM for the keyspace's replication factor.",
            Reason::DowntimeExceeded => "A maintenance window would last (or lasted) longer than `maxDowntimeSeconds`.",
            Reason::ManagementApiFailed => "The management API could not be reached, or answered a call with a status its OpenAPI document does not give for success.",
            Reason::RestartFailed => "A DatacenterCleanup's CassandraTask `restart` of a rack failed (cass-operator's condition or pod counts say so): no further rack starts.",
            Reason::DatacenterNotFound => "A DatacenterCleanup names a CassandraDatacenter that does not exist in its namespace, or one with no Cassandra pods.",
        }
    }

    /// Every reason, for docs and tests that must list them all.
    pub const ALL: &'static [Reason] = &[
        Reason::CorruptSSTable,
        Reason::UnsupportedSSTable,
        Reason::InvalidRequest,
        Reason::InsufficientSpace,
        Reason::PermissionDenied,
        Reason::CassandraRunning,
        Reason::CassandraMayBeRunning,
        Reason::CheckFailed,
        Reason::Busy,
        Reason::IoError,
        Reason::Unauthorized,
        Reason::TooManyTransfers,
        Reason::Unreachable,
        Reason::ImportFailed,
        Reason::InvalidSpec,
        Reason::InvalidRepairMetadata,
        Reason::InvalidRange,
        Reason::TableBusy,
        Reason::ConcurrencyLimit,
        Reason::ParentChanged,
        Reason::PendingLost,
        Reason::WrongDestination,
        Reason::SecondaryIndexPresent,
        Reason::RingChanging,
        Reason::CassandraStartFailed,
        Reason::KeyspaceNotFound,
        Reason::TableNotFound,
        Reason::SSTableNotFound,
        Reason::ClusterUnavailable,
        Reason::DowntimeExceeded,
        Reason::ManagementApiFailed,
        Reason::RestartFailed,
        Reason::DatacenterNotFound,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::CorruptSSTable => "CorruptSSTable",
            Reason::UnsupportedSSTable => "UnsupportedSSTable",
            Reason::InvalidRequest => "InvalidRequest",
            Reason::InsufficientSpace => "InsufficientSpace",
            Reason::PermissionDenied => "PermissionDenied",
            Reason::CassandraRunning => "CassandraRunning",
            Reason::CassandraMayBeRunning => "CassandraMayBeRunning",
            Reason::CheckFailed => "CheckFailed",
            Reason::Busy => "Busy",
            Reason::IoError => "IoError",
            Reason::Unauthorized => "Unauthorized",
            Reason::TooManyTransfers => "TooManyTransfers",
            Reason::Unreachable => "Unreachable",
            Reason::ImportFailed => "ImportFailed",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::InvalidRepairMetadata => "InvalidRepairMetadata",
            Reason::InvalidRange => "InvalidRange",
            Reason::TableBusy => "TableBusy",
            Reason::ConcurrencyLimit => "ConcurrencyLimit",
            Reason::ParentChanged => "ParentChanged",
            Reason::PendingLost => "PendingLost",
            Reason::WrongDestination => "WrongDestination",
            Reason::SecondaryIndexPresent => "SecondaryIndexPresent",
            Reason::RingChanging => "RingChanging",
            Reason::CassandraStartFailed => "CassandraStartFailed",
            Reason::KeyspaceNotFound => "KeyspaceNotFound",
            Reason::TableNotFound => "TableNotFound",
            Reason::SSTableNotFound => "SSTableNotFound",
            Reason::ClusterUnavailable => "ClusterUnavailable",
            Reason::DowntimeExceeded => "DowntimeExceeded",
            Reason::ManagementApiFailed => "ManagementApiFailed",
            Reason::RestartFailed => "RestartFailed",
            Reason::DatacenterNotFound => "DatacenterNotFound",
        }
    }

    /// The reason of an OS error: space and permission are named, the rest is `IoError`.
    pub fn of_io(e: &std::io::Error) -> Reason {
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => Reason::InsufficientSpace,
            Some(libc::EACCES) | Some(libc::EPERM) => Reason::PermissionDenied,
            _ => match e.kind() {
                std::io::ErrorKind::PermissionDenied => Reason::PermissionDenied,
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                    Reason::InsufficientSpace
                }
                _ => Reason::IoError,
            },
        }
    }
}

/// A failure as every layer reports it: its stable reason and a message naming the file,
/// field or offset and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: Reason,
    pub message: String,
}

impl Failure {
    pub fn new(reason: Reason, message: impl Into<String>) -> Failure {
        Failure {
            reason,
            message: message.into(),
        }
    }

    /// An OS error on `what` (a path, an operation), with the reason its errno gives.
    pub fn io(what: impl fmt::Display, e: &std::io::Error) -> Failure {
        Failure::new(Reason::of_io(e), format!("{what}: {e}"))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

impl std::error::Error for Failure {}

/// Why a condition changed or an Event was published when nothing failed: the milestones
/// of a run. Kept apart from [`Reason`] (failures) so that a metric labelled by failure
/// reason can never carry one; both are UpperCamelCase words of this file only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Milestone {
    /// This worker took the lease of a Pending resource.
    Started,
    /// This worker took over a Running resource whose previous worker stopped.
    Resumed,
    /// Every parent is done.
    Completed,
    /// A dry run finished: status says what would be done.
    DryRun,
    /// The worker stopped between two sstables (shutdown, deletion); the next one resumes.
    Interrupted,
    /// A RangeStream's spec is valid.
    Accepted,
    /// The spec passed validation (the `Accepted` condition's reason).
    Valid,
    /// An attempt failed with a retryable reason; the sender tries again.
    Retrying,
    /// A retried transfer went through.
    Recovered,
    /// A deleted resource's leftovers were removed.
    Cleanup,
    /// Cassandra was stopped through the management API for a maintenance window.
    WindowOpened,
    /// Cassandra is ready again after a maintenance window.
    WindowClosed,
    /// An `OnRestart` job's children are staged and its intent durable: they are published when Cassandra restarts (`cleave apply-pending` in the init container).
    AwaitingRestart,
}

impl Milestone {
    /// What it means, from its doc comment (the reasons table of docs/operator.md).
    pub fn doc(self) -> &'static str {
        match self {
            Milestone::Started => "This worker took the lease of a Pending resource.",
            Milestone::Resumed => "This worker took over a Running resource whose previous worker stopped.",
            Milestone::Completed => "Every parent is done.",
            Milestone::DryRun => "A dry run finished: status says what would be done.",
            Milestone::Interrupted => "The worker stopped between two sstables (shutdown, deletion); the next one resumes.",
            Milestone::Accepted => "A RangeStream's spec is valid.",
            Milestone::Valid => "The spec passed validation (the `Accepted` condition's reason).",
            Milestone::Retrying => "An attempt failed with a retryable reason; the sender tries again.",
            Milestone::Recovered => "A retried transfer went through.",
            Milestone::Cleanup => "A deleted resource's leftovers were removed.",
            Milestone::WindowOpened => "Cassandra was stopped through the management API for a maintenance window.",
            Milestone::WindowClosed => "Cassandra is ready again after a maintenance window.",
            Milestone::AwaitingRestart => "An `OnRestart` job's children are staged and its intent durable: they are published when Cassandra restarts (`cleave apply-pending` in the init container).",
        }
    }

    pub const ALL: &'static [Milestone] = &[
        Milestone::Started,
        Milestone::Resumed,
        Milestone::Completed,
        Milestone::DryRun,
        Milestone::Interrupted,
        Milestone::Accepted,
        Milestone::Valid,
        Milestone::Retrying,
        Milestone::Recovered,
        Milestone::Cleanup,
        Milestone::WindowOpened,
        Milestone::WindowClosed,
        Milestone::AwaitingRestart,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Milestone::Started => "Started",
            Milestone::Resumed => "Resumed",
            Milestone::Completed => "Completed",
            Milestone::DryRun => "DryRun",
            Milestone::Interrupted => "Interrupted",
            Milestone::Accepted => "Accepted",
            Milestone::Valid => "Valid",
            Milestone::Retrying => "Retrying",
            Milestone::Recovered => "Recovered",
            Milestone::Cleanup => "Cleanup",
            Milestone::WindowOpened => "WindowOpened",
            Milestone::WindowClosed => "WindowClosed",
            Milestone::AwaitingRestart => "AwaitingRestart",
        }
    }
}

/// The reason of a condition or an Event: a failure or a milestone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Why {
    Failure(Reason),
    Milestone(Milestone),
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Failure(r) => r.as_str(),
            Why::Milestone(m) => m.as_str(),
        }
    }
}

impl From<Reason> for Why {
    fn from(r: Reason) -> Why {
        Why::Failure(r)
    }
}

impl From<Milestone> for Why {
    fn from(m: Milestone) -> Why {
        Why::Milestone(m)
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Reason {
    type Err = String;
    /// The reason a status recorded (`status.reason`), read back.
    fn from_str(s: &str) -> Result<Reason, String> {
        Reason::ALL
            .iter()
            .copied()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a cleave reason"))
    }
}

/// The Markdown table of every reason and milestone (docs/operator.md embeds it; a test
/// keeps the two equal).
pub fn markdown_table() -> String {
    let mut s = String::from("| reason | kind | meaning |\n|---|---|---|\n");
    for r in Reason::ALL {
        s.push_str(&format!("| `{}` | failure | {} |\n", r.as_str(), r.doc()));
    }
    for m in Milestone::ALL {
        s.push_str(&format!("| `{}` | milestone | {} |\n", m.as_str(), m.doc()));
    }
    s
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_reason_once_with_a_camel_case_name() {
        let mut names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert!(names
            .iter()
            .all(|n| n.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && n.chars().all(|c| c.is_ascii_alphanumeric())));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Reason::ALL.len());
    }

    #[test]
    fn os_errors_map_to_space_and_permission() {
        let enospc = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let edquot = std::io::Error::from_raw_os_error(libc::EDQUOT);
        let eacces = std::io::Error::from_raw_os_error(libc::EACCES);
        let eio = std::io::Error::from_raw_os_error(libc::EIO);
        assert_eq!(Reason::of_io(&enospc), Reason::InsufficientSpace);
        assert_eq!(Reason::of_io(&edquot), Reason::InsufficientSpace);
        assert_eq!(Reason::of_io(&eacces), Reason::PermissionDenied);
        assert_eq!(Reason::of_io(&eio), Reason::IoError);
    }

    #[test]
    fn docs_operator_md_has_the_generated_reasons_table() {
        let doc = include_str!("../docs/operator.md");
        let want = format!(
            "<!-- reasons:begin -->\n{}<!-- reasons:end -->",
            markdown_table()
        );
        assert!(
            doc.contains(&want),
            "docs/operator.md's reasons table is not reason::markdown_table(); put this between the markers:\n{want}"
        );
    }
}

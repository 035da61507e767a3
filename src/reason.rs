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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Reason {
    /// A component fails a check: a checksum, an order, a length, a field out of range.
    CorruptSSTable,
    /// A well-formed sstable that uses something cleave does not handle (BTI, Zstd, `la`, …).
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
}

impl Reason {
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
        Reason::WrongDestination,
        Reason::SecondaryIndexPresent,
        Reason::RingChanging,
        Reason::CassandraStartFailed,
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
            Reason::WrongDestination => "WrongDestination",
            Reason::SecondaryIndexPresent => "SecondaryIndexPresent",
            Reason::RingChanging => "RingChanging",
            Reason::CassandraStartFailed => "CassandraStartFailed",
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
}

//! Which Cassandra release will read an sstable, and what its readers do with Data.db's
//! first bytes.
//!
//! From 5.0.5 on, every whole-sstable scanner of stock Cassandra reads Data.db linearly
//! from uncompressed position 0: CASSANDRA-20092 (`SSTableSimpleScanner`, listed in the
//! 5.0.5 section of cassandra-5.0's CHANGES.txt) made `SSTableReader.getScanner()` scan
//! `getPositionsForFullRange()` = `new PartitionPositionBounds(0, uncompressedLength())`,
//! with no setting to turn it off. Compaction, `upgradesstables`, `garbagecollect`,
//! anticompaction of a straddling sstable and cleanup with a secondary index then read
//! whatever precedes the first indexed partition as a partition. Earlier releases (3.0 to
//! 5.0.4) scan through Index.db positions (`BigTableScanner`) and never look there
//! (docs/format.md, docs/compatibility.md).

use std::fmt;

/// A Cassandra release: `major.minor[.patch]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
    /// `None` when only the release line was given (`5.0`): every patch of it is possible.
    pub patch: Option<u32>,
}

/// The Cassandra that reads what cleave publishes. `Unknown` is the newest release line,
/// the strictest reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TargetCassandra {
    #[default]
    Unknown,
    Known(Release),
}

/// The first 5.0 patch release whose compaction scans Data.db from position 0.
pub const FIRST_LINEAR_SCAN: Release = Release {
    major: 5,
    minor: 0,
    patch: Some(5),
};

impl TargetCassandra {
    /// Parses `3.11.17`, `4.1`, `5.0.5`, `5.0.6-SNAPSHOT`, `6.0`, `trunk`, `unknown` (and an
    /// empty string: unknown), as `--target-cassandra`, `--cassandra-version`, the spec
    /// field and the management API's `/api/v0/metadata/versions/release` spell them.
    pub fn parse(s: &str) -> Result<TargetCassandra, String> {
        let t = s.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("unknown") || t.eq_ignore_ascii_case("latest") {
            return Ok(TargetCassandra::Unknown);
        }
        if t.eq_ignore_ascii_case("trunk") {
            return Ok(TargetCassandra::Known(Release {
                major: 6,
                minor: 0,
                patch: None,
            }));
        }
        // "5.0.6-SNAPSHOT", "4.1.3+build" → the numeric part.
        let numeric = t.split(['-', '+', ' ']).next().unwrap_or(t);
        let parts: Vec<&str> = numeric.split('.').collect();
        let bad = || {
            format!("{s:?} is not a Cassandra release (MAJOR.MINOR[.PATCH], e.g. 4.1 or 5.0.5, or unknown)")
        };
        if parts.len() < 2 || parts.len() > 3 {
            return Err(bad());
        }
        let num = |p: &str| p.parse::<u32>().map_err(|_| bad());
        let major = num(parts[0])?;
        let minor = num(parts[1])?;
        let patch = parts.get(2).map(|p| num(p)).transpose()?;
        if major < 3 {
            return Err(format!(
                "{s:?}: cleave's children are BIG sstables ma (3.0) to oa (5.0); Cassandra {major}.x cannot read them"
            ));
        }
        Ok(TargetCassandra::Known(Release {
            major,
            minor,
            patch,
        }))
    }

    /// Whether this reader's whole-sstable scans start at Data.db position 0, so that a
    /// child must have its first partition there (no dead prefix). True from 5.0.5, for a
    /// bare `5.0` (any patch is possible), for 5.1/6.0/trunk (CASSANDRA-20092 is on trunk
    /// and no fix for cleave's children has shipped), and when the version is unknown.
    pub fn scans_data_from_zero(&self) -> bool {
        match *self {
            TargetCassandra::Unknown => true,
            TargetCassandra::Known(r) => match (r.major, r.minor, r.patch) {
                (m, _, _) if m >= 6 => true,
                (5, n, _) if n >= 1 => true,
                (5, 0, None) => true,
                (5, 0, Some(p)) => p >= 5,
                _ => false,
            },
        }
    }
}

impl fmt::Display for TargetCassandra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetCassandra::Unknown => write!(f, "unknown"),
            TargetCassandra::Known(r) => match r.patch {
                Some(p) => write!(f, "{}.{}.{p}", r.major, r.minor),
                None => write!(f, "{}.{}", r.major, r.minor),
            },
        }
    }
}

impl serde::Serialize for TargetCassandra {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::str::FromStr for TargetCassandra {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        TargetCassandra::parse(s)
    }
}

/// A finding that is not a failure: the sstable is valid, but some Cassandra reads it
/// wrong. `reason` is stable (JSON, text), `message` names the offset and the versions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    pub reason: &'static str,
    pub message: String,
}

/// The warning for an sstable whose first indexed partition is not at Data.db position 0
/// (a dead prefix: a cleave child made for 3.0–5.0.4, or by a cleave before 0.2).
pub fn dead_prefix_warning(first_position: Option<u64>) -> Option<Warning> {
    let p = first_position.filter(|p| *p > 0)?;
    Some(Warning {
        reason: "DeadPrefix",
        message: format!(
            "the first partition starts at Data.db position {p}, not 0 (a dead prefix): Cassandra 5.0.5 and later misread it in every compaction, upgradesstables and garbagecollect (CASSANDRA-20092 scans Data.db from position 0), every 5.0.x scrub misreads it and verify -e refuses it; 3.0 to 5.0.4 read it correctly through Index.db. Make it safe in place with Cassandra stopped: cleave rewrite <Data.db> --publish replace (docs/runbook.md)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_5_0_5_boundary() {
        let scans = |s: &str| TargetCassandra::parse(s).map(|t| t.scans_data_from_zero());
        for (v, want) in [
            ("3.0.29", false),
            ("3.11.17", false),
            ("4.0", false),
            ("4.1.7", false),
            ("5.0.4", false),
            ("5.0.3", false),
            ("5.0.5", true),
            ("5.0.6-SNAPSHOT", true),
            ("5.0", true),
            ("5.1", true),
            ("6.0", true),
            ("trunk", true),
            ("unknown", true),
            ("", true),
        ] {
            assert_eq!(scans(v), Ok(want), "{v}");
        }
        for bad in ["5", "five", "5.0.x", "2.2.19", "1.2.3.4"] {
            assert!(TargetCassandra::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            TargetCassandra::parse("4.1").map(|t| t.to_string()),
            Ok("4.1".into())
        );
        assert_eq!(TargetCassandra::default().to_string(), "unknown");
    }

    #[test]
    fn dead_prefix_warning_names_the_offset() {
        assert_eq!(dead_prefix_warning(Some(0)), None);
        assert_eq!(dead_prefix_warning(None), None);
        let w = dead_prefix_warning(Some(4093)).expect("warned");
        assert_eq!(w.reason, "DeadPrefix");
        assert!(w.message.contains("4093") && w.message.contains("5.0.5"));
    }
}

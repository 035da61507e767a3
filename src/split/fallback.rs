//! Why a child did not get the layout it asked for: a typed value carried from the place
//! the decision is made (plan or data writer) to the report, the CR status and the
//! `cleave_layout_fallbacks_total{reason}` metric. Nobody parses its message.

use std::fmt;

use super::plan::Layout;
use crate::io::reflink::CloneRefusal;
use crate::sstable::cassandra::TargetCassandra;
use crate::sstable::filler::Refusal;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// The target filesystem cannot share extents (the probe's refusal).
    NoShare(CloneRefusal),
    /// `aligned`/`padded` tune the first chunk's LZ4 encoding; this parent uses another codec.
    Codec { layout: Layout, compressor: String },
    /// `--layout padded` without `--target-data-access standard`.
    PaddedNotAllowed,
    /// No LZ4 encoding of the first chunk puts the next chunk at the residue the interior
    /// needs to clone.
    NoAlignedEncoding {
        dead_prefix: u64,
        residue: u64,
        block: u64,
    },
    /// `padded`: no LZ4 encoding of the first chunk has its original stored length
    /// (`after_aligned`: tried because `aligned` found none first).
    NoExactEncoding { length: u64, after_aligned: bool },
    /// The probe said yes but a range was refused mid-way: the rest was copied.
    CloneRefused(CloneRefusal),
    /// The target Cassandra scans Data.db from position 0 (5.0.5+, or unknown) and no
    /// filler partition fits the child's dead prefix: the child is `regrid` instead.
    DeadPrefix {
        target: TargetCassandra,
        refusal: Refusal,
    },
}

impl Fallback {
    /// A bounded, stable label: the metric's `reason` label and the JSON `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Fallback::NoShare(r) => r.label(),
            Fallback::Codec { .. } => "codec",
            Fallback::PaddedNotAllowed => "padded_not_allowed",
            Fallback::NoAlignedEncoding { .. } => "no_aligned_encoding",
            Fallback::NoExactEncoding { .. } => "no_exact_encoding",
            Fallback::CloneRefused(_) => "clone_refused",
            Fallback::DeadPrefix { refusal, .. } => match refusal {
                Refusal::FixedWidthKey(_) => "dead_prefix_fixed_width_key",
                Refusal::KeyType(_) => "dead_prefix_key_type",
                Refusal::StaticColumns => "dead_prefix_static_columns",
                Refusal::ManyColumns(_) => "dead_prefix_many_columns",
                Refusal::Partitioner(_) => "dead_prefix_partitioner",
                Refusal::NarrowWindow { .. } | Refusal::NotFound { .. } => {
                    "dead_prefix_token_window"
                }
                Refusal::NoHeader => "dead_prefix_no_header",
                Refusal::NoFloor => "dead_prefix_no_floor",
                Refusal::ShortDeadPrefix { .. } => "dead_prefix_short",
            },
        }
    }

    /// Every label `reason()` can return, for metric docs and tests.
    pub const REASONS: &'static [&'static str] = &[
        "reflink_not_supported",
        "cross_device",
        "no_clone_ioctl",
        "clone_invalid",
        "clone_not_permitted",
        "clone_failed",
        "codec",
        "padded_not_allowed",
        "no_aligned_encoding",
        "no_exact_encoding",
        "clone_refused",
        "dead_prefix_fixed_width_key",
        "dead_prefix_key_type",
        "dead_prefix_static_columns",
        "dead_prefix_many_columns",
        "dead_prefix_partitioner",
        "dead_prefix_token_window",
        "dead_prefix_no_header",
        "dead_prefix_no_floor",
        "dead_prefix_short",
    ];
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::NoShare(r) => write!(f, "{r}"),
            Fallback::Codec { layout, compressor } => write!(
                f,
                "{layout:?} needs LZ4 chunks to tune the first chunk's length; the parent uses {compressor}"
            ),
            Fallback::PaddedNotAllowed => f.write_str(
                "padded needs --target-data-access standard (a head pad breaks mmap'd Data.db reads)",
            ),
            Fallback::NoAlignedEncoding { dead_prefix, residue, block } => write!(
                f,
                "no LZ4 encoding of the first chunk (dead prefix {dead_prefix} bytes) puts the next chunk at offset {residue} mod {block}"
            ),
            Fallback::NoExactEncoding { length, after_aligned } => write!(
                f,
                "{}no LZ4 encoding of the first chunk has its original length {length}",
                if *after_aligned { "no aligned encoding either; " } else { "" }
            ),
            Fallback::CloneRefused(r) => write!(f, "a clone was refused mid-way, copied instead: {r}"),
            Fallback::DeadPrefix { target, refusal } => write!(
                f,
                "Cassandra {target} compacts Data.db from position 0, so the child may not start with a dead prefix, and no filler partition fits it ({refusal}): re-encoded from position 0 (regrid)"
            ),
        }
    }
}

/// `{"reason": "<label>", "message": "<Display>"}`.
impl serde::Serialize for Fallback {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Fallback", 2)?;
        st.serialize_field("reason", self.reason())?;
        st.serialize_field("message", &self.to_string())?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_listed_and_the_codec_label_exists() {
        let all = [
            Fallback::NoShare(CloneRefusal::NotSupported),
            Fallback::NoShare(CloneRefusal::CrossDevice),
            Fallback::NoShare(CloneRefusal::NoIoctl),
            Fallback::NoShare(CloneRefusal::Invalid),
            Fallback::NoShare(CloneRefusal::NotPermitted),
            Fallback::NoShare(CloneRefusal::Other(5)),
            Fallback::Codec {
                layout: Layout::Aligned,
                compressor: "SnappyCompressor".into(),
            },
            Fallback::PaddedNotAllowed,
            Fallback::NoAlignedEncoding {
                dead_prefix: 0,
                residue: 1,
                block: 4096,
            },
            Fallback::NoExactEncoding {
                length: 9,
                after_aligned: true,
            },
            Fallback::CloneRefused(CloneRefusal::Invalid),
        ];
        let t = TargetCassandra::Unknown;
        let dead = |refusal| Fallback::DeadPrefix { target: t, refusal };
        let all: Vec<Fallback> = all
            .into_iter()
            .chain([
                dead(Refusal::FixedWidthKey("Int32Type".into())),
                dead(Refusal::KeyType("MapType".into())),
                dead(Refusal::StaticColumns),
                dead(Refusal::ManyColumns(64)),
                dead(Refusal::Partitioner(
                    crate::sstable::Partitioner::ByteOrdered,
                )),
                dead(Refusal::NotFound { tries: 9 }),
                dead(Refusal::NoHeader),
                dead(Refusal::NoFloor),
                dead(Refusal::ShortDeadPrefix { bytes: 3 }),
            ])
            .collect();
        let labels: Vec<&str> = all.iter().map(Fallback::reason).collect();
        assert_eq!(labels, Fallback::REASONS);
        let v = serde_json::to_value(&all[6]).unwrap_or_default();
        assert_eq!(v["reason"], "codec");
        assert!(v["message"]
            .as_str()
            .is_some_and(|m| m.contains("SnappyCompressor")));
    }
}

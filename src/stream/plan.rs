//! Range children for the sender: the split engine's `Plan` for one parent sstable and
//! the RangeStream's token ranges, turned into `ChildSource`s without writing a byte.
//!
//! The cut is anticompaction's (`Cut::Ranges`, the ranges as `full`): every partition in
//! an `(l, r]` range is labelled `full`, the rest `unrepaired`, and each contiguous run of
//! one label is one child. Only the `full` children are sent. Each child's Data.db is the
//! parent's chunk run verbatim (`send::Segment::File` on the parent Data.db) plus the two
//! re-encoded boundary chunks (`Segment::Bytes`); Index, CompressionInfo, Summary, Filter
//! and Statistics are rebuilt in memory from the child's part of the parent's Index.db.
//!
//! Choices (docs/stream.md "Range children"):
//! - No small-run merging: anticompaction merges runs under `merge_below_chunks` into one
//!   `regrid` child per label, which re-encodes every row's chunk and has no parent ranges
//!   to carry. A sender must not decode rows, so it plans with `merge_below_chunks = 0`:
//!   a small run is sent as its own small zero-copy child. A `regrid` child can therefore
//!   not occur; if one did, the sstable fails with `InvalidRequest` rather than being
//!   skipped (skipping would silently lose data in the ranges).
//! - Uncompressed parents have no chunk runs to carry (`Plan::data_layout` is compressed
//!   only): refused with `InvalidRequest` naming the file, unless every partition is in
//!   the ranges, in which case the sstable is sent whole (`send::whole_sstable`).
//! - The children's repair triple is unrepaired (repairedAt 0, no pending session), as
//!   Cassandra gives streamed sstables outside a repair session
//!   (`CassandraEntireSSTableStreamReader` mutates the received sstable's repair metadata
//!   to the stream session's, 0 for bootstrap/rebuild/move).

use crate::sstable::cassandra::TargetCassandra;
use std::path::Path;

use hyper::body::Bytes;

use super::manifest::{FileEntry, Manifest, ManifestFormat};
use super::send::{self, ChildName, ChildSource, FileSource, Segment};
use super::StreamError;
use crate::split::plan::{Layout, Policy};
use crate::split::spec::{Cut, Label, RepairSession, RepairedRanges};
use crate::split::{DigestPolicy, Parent, SplitError};
use crate::sstable::{Component, TokenRange};

/// One child to send and where it came from in the parent.
#[derive(Debug, Clone)]
pub struct RangeChild {
    /// The child's index in the split plan (part of its transfer id).
    pub index: usize,
    pub partitions: u64,
    pub first_token: String,
    pub last_token: String,
    pub source: ChildSource,
}

/// The children of one parent for some ranges. Empty when no partition is in the ranges.
#[derive(Debug, Clone)]
pub struct RangeChildren {
    pub children: Vec<RangeChild>,
    /// Partitions of the parent in the ranges (the children's partitions add up to it).
    pub partitions_in_ranges: u64,
    pub parent_partitions: u64,
}

impl RangeChildren {
    pub fn bytes_total(&self) -> u64 {
        self.children
            .iter()
            .map(|c| c.source.manifest.total_bytes())
            .sum()
    }
}

/// The transfer id of child `index` of a parent: `<prefix>.c<index>`.
pub fn child_transfer_id(prefix: &str, index: usize) -> String {
    format!("{prefix}.c{index}")
}

/// Plans the children of the sstable at `data` holding its partitions in `ranges` and
/// builds each one's segments and small components. `name.transfer` is the parent's
/// transfer id prefix; each child's id is `child_transfer_id(prefix, index)`.
pub fn range_children(
    data: &Path,
    ranges: &[TokenRange],
    name: &ChildName,
    target: TargetCassandra,
) -> Result<RangeChildren, StreamError> {
    let parent = Parent::open(data).map_err(SplitError::from)?;
    let cut = Cut::Ranges(RepairedRanges {
        full: ranges.to_vec(),
        transient: Vec::new(),
        session: RepairSession::Unrepaired,
    });
    let policy = Policy {
        layout: Some(Layout::Aligned),
        digest: DigestPolicy::Combine,
        merge_below_chunks: 0,
        target,
        ..Policy::default()
    };
    let plan = parent.plan(&cut, &policy).map_err(SplitError::from)?;
    let in_ranges: Vec<usize> = (0..plan.children.len())
        .filter(|&i| plan.children[i].label == Some(Label::Full))
        .collect();
    let partitions_in_ranges = in_ranges
        .iter()
        .map(|&i| plan.children[i].child.partitions())
        .sum();
    let parent_partitions = plan.partitions();
    let t = plan.parent.table();
    if t.compression.is_none() && !in_ranges.is_empty() {
        if partitions_in_ranges == parent_partitions {
            let mut n = name.clone();
            n.transfer = child_transfer_id(&name.transfer, 0);
            let source = send::whole_sstable(data, &n)?;
            let c = &plan.children[in_ranges[0]].child;
            return Ok(RangeChildren {
                children: vec![RangeChild {
                    index: 0,
                    partitions: parent_partitions,
                    first_token: c.runs[0].first_token.clone(),
                    last_token: c.runs[c.runs.len() - 1].last_token.clone(),
                    source,
                }],
                partitions_in_ranges,
                parent_partitions,
            });
        }
        return Err(StreamError::Invalid(format!(
            "{}: uncompressed sstable with {partitions_in_ranges} of {parent_partitions} partitions in the ranges: range children need compressed chunks to carry (send it whole, or compress the table)",
            data.display()
        )));
    }
    let version = t.descriptor.version.to_string();
    let mut children = Vec::new();
    for i in in_ranges {
        let cp = &plan.children[i];
        let layout = plan.data_layout(i, 0).map_err(SplitError::from)?;
        let built = plan.components(i, &layout).map_err(SplitError::from)?;
        let mut data_crc = None;
        let mut files = Vec::new();
        let mut entries = Vec::new();
        for (c, bytes) in built {
            match c {
                // The receiver computes Digest.crc32 and writes TOC.txt; the digest's value
                // is the manifest's whole-file CRC of Data.db.
                Component::Digest => {
                    data_crc = std::str::from_utf8(&bytes)
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .and_then(|v| u32::try_from(v).ok());
                }
                Component::Toc => {}
                c => {
                    entries.push(FileEntry {
                        component: c.file_name().to_string(),
                        size: bytes.len() as u64,
                        crc32: crc32fast::hash(&bytes),
                    });
                    files.push(FileSource {
                        component: c.file_name().to_string(),
                        segments: vec![Segment::Bytes(Bytes::from(bytes))],
                    });
                }
            }
        }
        let Some(crc32) = data_crc else {
            return Err(StreamError::Invalid(format!(
                "{}: child {i}: the planner built no Data.db digest",
                data.display()
            )));
        };
        let mut segments = Vec::with_capacity(layout.segments.len());
        let mut at = 0;
        for s in layout.segments {
            // The segments tile the child's Data.db from 0 in order (data::compressed_layout).
            if s.dst() != at {
                return Err(StreamError::Invalid(format!(
                    "{}: child {i}: Data.db segment at {} after {at} bytes",
                    data.display(),
                    s.dst()
                )));
            }
            at += s.len();
            segments.push(match s {
                crate::split::data::Segment::Parent { src, len, .. } => Segment::File {
                    path: data.to_path_buf(),
                    offset: src,
                    len,
                },
                crate::split::data::Segment::Bytes { bytes, .. } => {
                    Segment::Bytes(Bytes::from(bytes))
                }
            });
        }
        entries.push(FileEntry {
            component: Component::Data.file_name().to_string(),
            size: at,
            crc32,
        });
        files.push(FileSource {
            component: Component::Data.file_name().to_string(),
            segments,
        });
        order(&mut entries, &mut files);
        let manifest = Manifest {
            transfer: child_transfer_id(&name.transfer, i),
            group: name.group.clone(),
            keyspace: name.keyspace.clone(),
            table: name.table.clone(),
            version: version.clone(),
            format: ManifestFormat::of(t.descriptor.format),
            import: name.import,
            source: name.source.clone(),
            destination: name.destination.clone(),
            files: entries,
        };
        manifest.validate()?;
        let run = &cp.child.runs[0];
        children.push(RangeChild {
            index: i,
            partitions: cp.child.partitions(),
            first_token: run.first_token.clone(),
            last_token: run.last_token.clone(),
            source: ChildSource { manifest, files },
        });
    }
    Ok(RangeChildren {
        children,
        partitions_in_ranges,
        parent_partitions,
    })
}

/// Puts files in the sender's order (the chunk table before Data.db, which is last).
fn order(entries: &mut [FileEntry], files: &mut [FileSource]) {
    let rank = |name: &str| {
        send::ORDER
            .iter()
            .position(|c| c.file_name() == name)
            .unwrap_or(send::ORDER.len())
    };
    entries.sort_by_key(|e| rank(&e.component));
    files.sort_by_key(|f| rank(&f.component));
}

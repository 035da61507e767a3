//! Rebuilding a child's non-data components from the stream of its index entries:
//! Index.db (positions rebased), Summary.db, Filter.db, the partition-size histogram,
//! the key fingerprint, and finally Statistics.db.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::spec::RepairTriple;
use crate::sstable::checksum::{ChunkChecksums, Digest};
use crate::sstable::filter::BloomFilter;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::index::IndexWriter;
use crate::sstable::murmur::KeyHash;
use crate::sstable::statistics::{EstimatedHistogram, Statistics};
use crate::sstable::summary::SummaryBuilder;
use crate::sstable::{Component, SSTable, Toc};
use crate::sstable::{FormatError, Result, Version};

/// Accumulates one child's index-derived components; Index.db goes to `W` (a file for a
/// split, a buffer for a stream sender).
pub struct IndexSide<W: Write> {
    pub index_path: PathBuf,
    index: IndexWriter<W>,
    summary: SummaryBuilder,
    filter: Option<BloomFilter>,
    partition_sizes: EstimatedHistogram,
    pub fingerprint: Fingerprint,
    pub first_key: Option<Vec<u8>>,
    pub last_key: Vec<u8>,
    /// Child position of the first and last partition (for the boundary check).
    pub first_position: Option<u64>,
    pub last_position: u64,
    pub fillers: u64,
}

/// What every child's index side is built with, read from the parent once.
#[derive(Debug, Clone, Copy)]
pub struct IndexShape {
    pub min_index_interval: i32,
    pub fp_chance: f64,
    pub want_filter: bool,
    pub histogram_buckets: usize,
}

impl IndexShape {
    pub fn of(t: &SSTable) -> Result<IndexShape> {
        Ok(IndexShape {
            min_index_interval: t.summary()?.map_or(128, |s| s.min_index_interval),
            fp_chance: t
                .statistics
                .validation
                .as_ref()
                .map_or(0.01, |v| v.bloom_filter_fp_chance),
            want_filter: t.size_of(&Component::Filter).unwrap_or(0) > 0,
            histogram_buckets: t
                .statistics
                .stats
                .as_ref()
                .map_or(155, |s| s.partition_sizes.pairs.len().saturating_sub(1)),
        })
    }

    fn filter(&self, partitions: u64) -> Option<BloomFilter> {
        if self.want_filter {
            BloomFilter::with_capacity(partitions, self.fp_chance)
        } else {
            None
        }
    }
}

impl IndexSide<BufWriter<File>> {
    pub fn create(index_path: &Path, shape: &IndexShape, partitions: u64) -> Result<Self> {
        let f = File::options()
            .write(true)
            .create_new(true)
            .open(index_path)
            .map_err(|e| FormatError::io(index_path, e))?;
        Ok(IndexSide::new(
            index_path,
            BufWriter::with_capacity(1 << 20, f),
            shape,
            partitions,
        ))
    }
}

impl<W: Write> IndexSide<W> {
    pub fn new(index_path: &Path, out: W, shape: &IndexShape, partitions: u64) -> Self {
        IndexSide {
            index_path: index_path.to_path_buf(),
            // Positions arrive already rebased; the writer's own base is 0.
            index: IndexWriter::new(out, 0),
            summary: SummaryBuilder::new(shape.min_index_interval),
            filter: shape.filter(partitions),
            partition_sizes: EstimatedHistogram::empty(shape.histogram_buckets),
            fingerprint: Fingerprint::default(),
            first_key: None,
            last_key: Vec::new(),
            first_position: None,
            last_position: 0,
            fillers: 0,
        }
    }

    /// One partition: its key and the key's hash (computed once by the caller, who also
    /// counts it in the parent's fingerprint), its position in the child, its size in
    /// bytes, and its promoted index (copied verbatim: it is relative to the partition
    /// start).
    pub fn add(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        child_position: u64,
        size: u64,
        promoted_index: &[u8],
    ) -> Result<()> {
        self.list(key, hash, child_position, size, promoted_index)?;
        self.fingerprint.add_hash(hash);
        Ok(())
    }

    /// A partition in Index.db, Summary.db, Filter.db, the size histogram and the
    /// first/last keys (everything but the key fingerprint).
    fn list(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        child_position: u64,
        size: u64,
        promoted_index: &[u8],
    ) -> Result<()> {
        let at = self
            .index
            .append(key, child_position, promoted_index)
            .map_err(|e| FormatError::io(&self.index_path, e))?;
        self.summary.add(key, at);
        if let Some(f) = &mut self.filter {
            f.add_hash(hash);
        }
        // SortedTableWriter records each partition's size (end - start, EOP byte included).
        self.partition_sizes.add(size as i64);
        if self.first_key.is_none() {
            self.first_key = Some(key.to_vec());
            self.first_position = Some(child_position);
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.last_position = child_position;
        Ok(())
    }

    /// A dead-prefix filler (`sstable::filler`): listed like any partition (Index.db,
    /// Summary.db, Filter.db, the size histogram, first key), but no key of the parent's,
    /// so not in the fingerprint the children must add up to.
    pub fn add_filler(&mut self, key: &[u8], child_position: u64, size: u64) -> Result<()> {
        self.list(key, KeyHash::of(key), child_position, size, &[])?;
        self.fillers += 1;
        Ok(())
    }

    /// Every filler of `head`, from position 0.
    pub fn add_fillers(&mut self, head: &super::head::Head) -> Result<()> {
        let mut at = 0u64;
        for f in head.fillers() {
            self.add_filler(&f.key, at, f.bytes.len() as u64)?;
            at += f.bytes.len() as u64;
        }
        Ok(())
    }

    /// Flushes Index.db; returns its sink (durable later, with the child's other files)
    /// and the finished pieces.
    pub fn finish(self) -> Result<(W, IndexParts)> {
        let path = self.index_path.clone();
        let w = self.index.finish().map_err(|e| FormatError::io(&path, e))?;
        Ok((
            w,
            IndexParts {
                summary: self.summary,
                filter: self.filter,
                partition_sizes: self.partition_sizes,
                fingerprint: self.fingerprint,
                first_key: self.first_key.unwrap_or_default(),
                last_key: self.last_key,
                first_position: self.first_position.unwrap_or(0),
                last_position: self.last_position,
                fillers: self.fillers,
            },
        ))
    }
}

pub struct IndexParts {
    pub summary: SummaryBuilder,
    pub filter: Option<BloomFilter>,
    pub partition_sizes: EstimatedHistogram,
    pub fingerprint: Fingerprint,
    pub first_key: Vec<u8>,
    pub last_key: Vec<u8>,
    pub first_position: u64,
    pub last_position: u64,
    /// Filler partitions listed (`add_filler`).
    pub fillers: u64,
}

impl IndexParts {
    pub fn summary_clone(&self) -> crate::sstable::summary::Summary {
        self.summary.snapshot()
    }
}

/// The child's Statistics.db from the parent's (sstable-format.md §8.4): VALIDATION,
/// COMPACTION and HEADER verbatim (HEADER's EncodingStats are what rows are delta-encoded
/// against; the parent's HyperLogLog sketch merges idempotently), STATS with the exact
/// partition-size histogram, the child's repair triple, first/last key (`nc`+),
/// tokenSpaceCoverage unknown (NaN lets UCS derive it from first/last), and the compression
/// ratio of the child's bytes. Bounds (timestamps, TTLs, clustering) stay the parent's: a
/// superset, which only makes Cassandra skip this sstable less often.
pub fn child_statistics(
    parent: &Statistics,
    version: Version,
    parts: &IndexParts,
    triple: Option<RepairTriple>,
    compression_ratio: Option<f64>,
) -> Statistics {
    let mut s = parent.clone();
    if let Some(st) = s.stats.as_mut() {
        st.partition_sizes = parts.partition_sizes.clone();
        if let Some(t) = triple {
            st.repaired_at = t.repaired_at;
            if version.has_pending_repair() {
                st.pending_repair = Some(t.pending_repair);
                // A pre-release `na` parent has no isTransient field; keep its layout.
                if st.is_transient.is_some() {
                    st.is_transient = Some(t.is_transient);
                }
            }
        }
        if version.has_key_range() {
            st.first_key = Some(parts.first_key.clone());
            st.last_key = Some(parts.last_key.clone());
        }
        if version.has_token_space_coverage() {
            st.token_space_coverage = Some(f64::NAN);
        }
        if let Some(r) = compression_ratio {
            st.compression_ratio = r;
        }
    }
    s
}

/// A rebuilt component ready to be written or sent.
pub type Built = (Component, Vec<u8>);

/// The child's small components but CompressionInfo.db (streamed from the parent's offsets)
/// and TOC.txt (written last): CRC.db, Summary.db, Filter.db, Statistics.db, Digest.crc32.
pub fn rebuilt_components(
    parent: &SSTable,
    parts: &IndexParts,
    triple: Option<RepairTriple>,
    data_length: u64,
    file_size: u64,
    crc: Option<&ChunkChecksums>,
    digest: Option<u32>,
) -> Vec<Built> {
    let mut out = Vec::with_capacity(5);
    if let Some(crc) = crc {
        out.push((Component::Crc, crc.serialize()));
    }
    out.push((Component::Summary, parts.summary_clone().serialize()));
    if let Some(f) = &parts.filter {
        out.push((Component::Filter, f.serialize(parent.old_filter_layout())));
    }
    let compression_ratio = parent.compression.as_ref().map(|_| {
        if data_length == 0 {
            -1.0
        } else {
            file_size as f64 / data_length as f64
        }
    });
    let stats = child_statistics(
        &parent.statistics,
        parent.descriptor.version,
        parts,
        triple,
        compression_ratio,
    );
    out.push((
        Component::Statistics,
        stats.serialize(parent.descriptor.version),
    ));
    if let Some(crc32) = digest {
        out.push((Component::Digest, Digest { crc32 }.serialize()));
    }
    out
}

/// TOC.txt listing Data, Index, CompressionInfo (when compressed), the rebuilt ones, itself.
pub fn toc(compressed: bool, rebuilt: &[Built]) -> Vec<u8> {
    let mut c = vec![Component::Data, Component::Index];
    if compressed {
        c.push(Component::CompressionInfo);
    }
    c.extend(rebuilt.iter().map(|(c, _)| c.clone()));
    c.push(Component::Toc);
    Toc { components: c }.serialize()
}

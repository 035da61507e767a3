//! Rebuilding a child's non-data components from the stream of its index entries:
//! the primary index in the parent's format (BIG: Index.db with positions rebased and
//! Summary.db; BTI: Partitions.db and Rows.db), Filter.db, the partition-size histogram,
//! the key fingerprint, and finally Statistics.db.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use super::spec::RepairTriple;
use crate::sstable::bti::scan::RowIndex;
use crate::sstable::bti::{IndexPos, PartitionIndexWriter, RowsWriter};
use crate::sstable::checksum::{ChunkChecksums, Digest};
use crate::sstable::filter::BloomFilter;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::index::{IndexWriter, TriePrefix};
use crate::sstable::murmur::KeyHash;
use crate::sstable::statistics::{EstimatedHistogram, Statistics};
use crate::sstable::summary::SummaryBuilder;
use crate::sstable::{Component, Descriptor, Format, Partitioner, SSTable, Toc};
use crate::sstable::{FormatError, Result, Version};

/// Accumulates one child's index-derived components; the index files go to `W` (files for
/// a split, buffers for a stream sender).
pub struct IndexSide<W: Write> {
    /// The first index component's path (Index.db, or BTI's Partitions.db): errors name it.
    pub index_path: PathBuf,
    index: ChildIndex<W>,
    filter: Option<BloomFilter>,
    parent_filter: bool,
    /// With the parent's filter: the hashes of keys it lacks (the fillers).
    filter_additions: Vec<KeyHash>,
    partition_sizes: EstimatedHistogram,
    pub fingerprint: Fingerprint,
    pub first_key: Option<Vec<u8>>,
    pub last_key: Vec<u8>,
    /// Child position of the first and last partition (for the boundary check).
    pub first_position: Option<u64>,
    pub last_position: u64,
    pub fillers: u64,
}

/// The primary index of a child, in its parent's format.
enum ChildIndex<W: Write> {
    /// Index.db, sampled into Summary.db.
    Big {
        index: IndexWriter<W>,
        summary: SummaryBuilder,
    },
    /// Partitions.db over the full keys (`PartitionIndexBuilder`), and Rows.db with the
    /// row index of each partition that has one, its Data.db position rebased.
    Bti {
        partitions: PartitionIndexWriter<W>,
        rows: RowsWriter<W>,
        rows_path: PathBuf,
        partitioner: Partitioner,
    },
}

/// The index components a format writes, in TOC order.
pub fn index_components(format: Format) -> &'static [Component] {
    match format {
        Format::Big => &[Component::Index],
        Format::Bti => &[Component::Partitions, Component::Rows],
    }
}

/// What every child's index side is built with, read from the parent once.
#[derive(Debug, Clone, Copy)]
pub struct IndexShape {
    pub min_index_interval: i32,
    pub fp_chance: f64,
    pub want_filter: bool,
    /// Children get a copy of the parent's Filter.db instead of their own
    /// (`split::trie_only`: no key to hash).
    pub parent_filter: bool,
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
            parent_filter: false,
            histogram_buckets: t
                .statistics
                .stats
                .as_ref()
                .map_or(155, |s| s.partition_sizes.pairs.len().saturating_sub(1)),
        })
    }

    /// The same, with the parent's Filter.db copied (when it has one) instead of built.
    pub fn with_parent_filter(self) -> IndexShape {
        IndexShape {
            parent_filter: self.want_filter,
            ..self
        }
    }

    fn filter(&self, partitions: u64) -> Option<BloomFilter> {
        if self.want_filter && !self.parent_filter {
            BloomFilter::with_capacity(partitions, self.fp_chance)
        } else {
            None
        }
    }
}

impl IndexSide<BufWriter<File>> {
    /// Index files created new in `desc`'s directory.
    pub fn create(
        desc: &Descriptor,
        partitioner: Partitioner,
        shape: &IndexShape,
        partitions: u64,
    ) -> Result<Self> {
        IndexSide::new(
            desc,
            partitioner,
            |c| {
                let p = desc.path(c);
                let f = File::options()
                    .write(true)
                    .create_new(true)
                    .open(&p)
                    .map_err(|e| FormatError::io(&p, e))?;
                Ok(BufWriter::with_capacity(1 << 20, f))
            },
            shape,
            partitions,
        )
    }
}

impl<W: Write> IndexSide<W> {
    /// `open` gives the sink of each of `index_components(desc.format)`.
    pub fn new(
        desc: &Descriptor,
        partitioner: Partitioner,
        mut open: impl FnMut(&Component) -> Result<W>,
        shape: &IndexShape,
        partitions: u64,
    ) -> Result<Self> {
        let (index_path, index) = match desc.format {
            Format::Big => (
                desc.path(&Component::Index),
                ChildIndex::Big {
                    // Positions arrive already rebased; the writer's own base is 0.
                    index: IndexWriter::new(open(&Component::Index)?, 0),
                    summary: SummaryBuilder::new(shape.min_index_interval),
                },
            ),
            Format::Bti => (
                desc.path(&Component::Partitions),
                ChildIndex::Bti {
                    partitions: PartitionIndexWriter::new(open(&Component::Partitions)?),
                    rows: RowsWriter::new(open(&Component::Rows)?),
                    rows_path: desc.path(&Component::Rows),
                    partitioner,
                },
            ),
        };
        Ok(IndexSide {
            index_path,
            index,
            filter: shape.filter(partitions),
            parent_filter: shape.parent_filter,
            filter_additions: Vec::new(),
            partition_sizes: EstimatedHistogram::empty(shape.histogram_buckets),
            fingerprint: Fingerprint::default(),
            first_key: None,
            last_key: Vec::new(),
            first_position: None,
            last_position: 0,
            fillers: 0,
        })
    }

    /// One partition: its key and the key's hash (computed once by the caller, who also
    /// counts it in the parent's fingerprint), its position in the child, its size in
    /// bytes, and its row index — BIG's promoted index or BTI's Rows.db blocks, either
    /// kept as it is: both are relative to the partition start.
    pub fn add(
        &mut self,
        key: ChildKey<'_>,
        hash: KeyHash,
        child_position: u64,
        size: u64,
        row_index: RowIndexRef<'_>,
    ) -> Result<()> {
        self.list(key, hash, child_position, size, row_index)?;
        self.fingerprint.add_hash(hash);
        Ok(())
    }

    /// A partition in Index.db, Summary.db, Filter.db, the size histogram and the
    /// first/last keys (everything but the key fingerprint).
    fn list(
        &mut self,
        child_key: ChildKey<'_>,
        hash: KeyHash,
        child_position: u64,
        size: u64,
        row_index: RowIndexRef<'_>,
    ) -> Result<()> {
        // The full key, where known: a trie-only entry has one only if it was read, and
        // then it must be the one the parent's trie names (Data.db and Partitions.db agree).
        let key = match child_key {
            ChildKey::Full(k) => k,
            ChildKey::Trie { key, prefix } => {
                if !key.is_empty() {
                    trie_key_matches(&self.index_path, key, prefix, child_position)?;
                }
                key
            }
        };
        match &mut self.index {
            ChildIndex::Big { .. } if matches!(child_key, ChildKey::Trie { .. }) => {
                return Err(FormatError::unsupported(
                    &self.index_path,
                    None,
                    "a BIG index needs every key; a trie prefix came",
                ));
            }
            ChildIndex::Big { index, summary } => {
                let at = index
                    .append(key, child_position, row_index.promoted)
                    .map_err(|e| FormatError::io(&self.index_path, e))?;
                summary.add(key, at);
            }
            ChildIndex::Bti {
                partitions,
                rows,
                rows_path,
                partitioner,
            } => {
                let pos = match row_index.rows {
                    Some(r) => IndexPos::Rows(
                        rows.append(key, child_position, &r.blocks, r.block_count, r.deletion)
                            .map_err(|e| bti_writer_error(rows_path, e))?,
                    ),
                    None => IndexPos::Data(child_position),
                };
                match child_key {
                    ChildKey::Full(key) | ChildKey::Trie { key, .. } if !key.is_empty() => {
                        partitions.add_key(*partitioner, key, pos)
                    }
                    // Cut by the builder's rule, the parent's prefixes give the trie the
                    // full keys would (`split::trie_only`).
                    ChildKey::Trie { prefix, .. } => {
                        partitions.add(prefix.comparable, prefix.hash, pos)
                    }
                    ChildKey::Full(key) => partitions.add_key(*partitioner, key, pos),
                }
                .map_err(|e| bti_writer_error(&self.index_path, e))?;
            }
        }
        match (&mut self.filter, child_key) {
            (Some(f), ChildKey::Full(_)) => f.add_hash(hash),
            // A filler is no key of the parent's filter: added to the child's copy.
            (None, ChildKey::Full(_)) if self.parent_filter => self.filter_additions.push(hash),
            _ => {}
        }
        // SortedTableWriter records each partition's size (end - start, EOP byte included).
        self.partition_sizes.add(size as i64);
        if self.first_position.is_none() {
            self.first_position = Some(child_position);
            if !key.is_empty() || matches!(child_key, ChildKey::Full(_)) {
                self.first_key = Some(key.to_vec());
            }
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.last_position = child_position;
        Ok(())
    }

    /// The first and last key of a child whose entries came from a trie-only scan (keys
    /// mostly not read): the ones its plan read at its bounds. A filler's key, read as one,
    /// stays first.
    pub fn set_key_range(&mut self, first: &[u8], last: &[u8]) {
        if self.first_key.is_none() {
            self.first_key = Some(first.to_vec());
        }
        if self.last_key.is_empty() {
            self.last_key.extend_from_slice(last);
        }
    }

    /// A dead-prefix filler (`sstable::filler`): listed like any partition (Index.db,
    /// Summary.db, Filter.db, the size histogram, first key), but no key of the parent's,
    /// so not in the fingerprint the children must add up to.
    pub fn add_filler(&mut self, key: &[u8], child_position: u64, size: u64) -> Result<()> {
        self.list(
            ChildKey::Full(key),
            KeyHash::of(key),
            child_position,
            size,
            RowIndexRef::default(),
        )?;
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

    /// Completes the index files; returns their sinks (durable later, with the child's
    /// other files) in TOC order, and the finished pieces.
    pub fn finish(self) -> Result<(Vec<(Component, W)>, IndexParts)> {
        let path = self.index_path.clone();
        let first_key = self.first_key.unwrap_or_default();
        let (sinks, summary) = match self.index {
            ChildIndex::Big { index, summary } => {
                let w = index.finish().map_err(|e| FormatError::io(&path, e))?;
                (vec![(Component::Index, w)], Some(summary))
            }
            ChildIndex::Bti {
                partitions,
                rows,
                rows_path,
                ..
            } => {
                let first_last = (!first_key.is_empty())
                    .then_some((first_key.as_slice(), self.last_key.as_slice()));
                let p = partitions
                    .finish(first_last)
                    .map_err(|e| FormatError::io(&path, e))?;
                let r = rows.finish().map_err(|e| FormatError::io(&rows_path, e))?;
                (vec![(Component::Partitions, p), (Component::Rows, r)], None)
            }
        };
        Ok((
            sinks,
            IndexParts {
                summary,
                filter: self.filter,
                parent_filter: self.parent_filter.then_some(self.filter_additions),
                partition_sizes: self.partition_sizes,
                fingerprint: self.fingerprint,
                first_key,
                last_key: self.last_key,
                first_position: self.first_position.unwrap_or(0),
                last_position: self.last_position,
                fillers: self.fillers,
            },
        ))
    }
}

/// A partition's key as a child's index takes it.
#[derive(Debug, Clone, Copy)]
pub enum ChildKey<'a> {
    Full(&'a [u8]),
    /// From a trie-only scan (`split::trie_only`): the parent's prefix and hash byte, and
    /// the key when it was read (else empty).
    Trie {
        prefix: TriePrefix<'a>,
        key: &'a [u8],
    },
}

impl<'a> ChildKey<'a> {
    /// A trie-only entry with its key, which the plan read: a child's first partition goes
    /// in whole, because a filler before it sorts below its key but not always below the
    /// parent's prefix of it (the filler's token can share that prefix).
    pub fn with_key(self, key: &'a [u8]) -> ChildKey<'a> {
        match self {
            ChildKey::Trie { prefix, key: &[] } => ChildKey::Trie { prefix, key },
            other => other,
        }
    }
}

/// Whether `key` is the partition a trie entry names: its byte-comparable form starts with
/// the stored prefix and its filter hash byte is the stored one (`bti::scan` checks every
/// key so; a trie-only split checks the few it reads).
pub fn trie_key_matches(
    file: &std::path::Path,
    key: &[u8],
    prefix: TriePrefix<'_>,
    position: u64,
) -> Result<()> {
    let comparable = crate::sstable::bti::keys::decorated_key(Partitioner::Murmur3, key);
    if comparable.is_some_and(|k| k.starts_with(prefix.comparable))
        && crate::sstable::bti::keys::hash_byte(key) == prefix.hash
    {
        return Ok(());
    }
    Err(FormatError::corrupt(
        file,
        None,
        format!(
            "the child's partition at Data.db position {position} has key {}, which does not match its trie entry (prefix {}, hash byte {:02x})",
            crate::sstable::hex::encode(key),
            crate::sstable::hex::encode(prefix.comparable),
            prefix.hash
        ),
    ))
}

/// A partition's row index as the parent's format holds it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowIndexRef<'a> {
    /// BIG: the promoted index bytes (empty when the partition has none).
    pub promoted: &'a [u8],
    /// BTI: the Rows.db entry, when the partition has one.
    pub rows: Option<&'a RowIndex>,
}

pub struct IndexParts {
    /// BIG only: BTI has no Summary.db.
    pub summary: Option<SummaryBuilder>,
    pub filter: Option<BloomFilter>,
    /// The child takes a copy of the parent's Filter.db (`IndexShape::with_parent_filter`)
    /// with these keys added (its fillers).
    pub parent_filter: Option<Vec<KeyHash>>,
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
    pub fn summary_clone(&self) -> Option<crate::sstable::summary::Summary> {
        self.summary.as_ref().map(SummaryBuilder::snapshot)
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
) -> Result<Vec<Built>> {
    let mut out = Vec::with_capacity(5);
    if let Some(crc) = crc {
        out.push((Component::Crc, crc.serialize()));
    }
    if let Some(summary) = parts.summary_clone() {
        out.push((Component::Summary, summary.serialize()));
    }
    if let Some(f) = &parts.filter {
        out.push((Component::Filter, f.serialize(parent.old_filter_layout())));
    } else if let Some(additions) = &parts.parent_filter {
        let p = parent.path(&Component::Filter);
        let bytes = std::fs::read(&p).map_err(|e| FormatError::io(&p, e))?;
        if additions.is_empty() {
            out.push((Component::Filter, bytes));
        } else {
            let old = parent.old_filter_layout();
            let mut f = BloomFilter::parse(&p, &bytes, old)?;
            for h in additions {
                f.add_hash(*h);
            }
            out.push((Component::Filter, f.serialize(old)));
        }
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
    Ok(out)
}

/// TOC.txt listing Data, the index components, CompressionInfo (when compressed), the
/// rebuilt ones, itself.
pub fn toc(format: Format, compressed: bool, rebuilt: &[Built]) -> Vec<u8> {
    let mut c = vec![Component::Data];
    c.extend_from_slice(index_components(format));
    if compressed {
        c.push(Component::CompressionInfo);
    }
    c.extend(rebuilt.iter().map(|(c, _)| c.clone()));
    c.push(Component::Toc);
    Toc { components: c }.serialize()
}

/// The BTI writers refuse what the parent's keys make impossible (keys out of order or
/// longer than 65535 bytes: `InvalidInput`; a partitioner without a byte-comparable form:
/// `Unsupported`) with an io::Error; those are facts about the data, not I/O, so they keep
/// the reason a reader of the same keys would give.
fn bti_writer_error(path: &std::path::Path, e: std::io::Error) -> FormatError {
    match e.kind() {
        std::io::ErrorKind::InvalidInput => FormatError::corrupt(path, None, e.to_string()),
        std::io::ErrorKind::Unsupported => FormatError::unsupported(path, None, e.to_string()),
        _ => FormatError::io(path, e),
    }
}

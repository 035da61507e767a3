//! Every partition of an sstable in token order — key, Data.db position, row index —
//! whatever indexes it: Index.db for BIG (`index::IndexReader`), Partitions.db, Rows.db
//! and the keys at their Data.db positions for BTI (`bti::scan`). Splitting, checking and
//! inspecting read partitions through this one door and never ask which format it is,
//! except where a child's index is written (`split::child`).
//!
//! A BTI scan borrows its two index files, read whole, from the `PartitionSource` the
//! caller holds; a BIG scan streams Index.db and borrows nothing.

use std::fs::File;
use std::path::PathBuf;

use super::bti::scan::{BtiIndexFiles, KeyMode, PartitionScan};
use super::bti::PartitionIndex;
use super::descriptor::{Component, Format};
use super::error::{FormatError, Result};
use super::index::{IndexEntryRef, IndexReader};
use super::table::SSTable;

/// What a partition reader reads from: Index.db's path, or BTI's index files in memory.
pub enum PartitionSource {
    Big(PathBuf),
    Bti(BtiIndexFiles, KeyMode),
}

pub enum PartitionReader<'a> {
    Big(IndexReader<File>),
    Bti(Box<PartitionScan<'a>>),
}

fn read_whole(t: &SSTable, c: Component) -> Result<(PathBuf, Vec<u8>)> {
    let p = t.path(&c);
    if !t.has(&c) {
        return Err(FormatError::corrupt(
            &p,
            None,
            format!("{} is missing", c.file_name()),
        ));
    }
    let b = std::fs::read(&p).map_err(|e| FormatError::io(&p, e))?;
    Ok((p, b))
}

impl PartitionSource {
    /// Every key read (a BTI key from Data.db or Rows.db, where Cassandra's scanner reads it).
    pub fn of(t: &SSTable) -> Result<PartitionSource> {
        PartitionSource::with_keys(t, KeyMode::Every)
    }

    /// A BTI source reading keys as `keys` says (a BIG one reads Index.db's keys whatever it
    /// says: they cost nothing more).
    pub fn with_keys(t: &SSTable, keys: KeyMode) -> Result<PartitionSource> {
        match t.descriptor.format {
            Format::Big => {
                let p = t.path(&Component::Index);
                if !t.has(&Component::Index) {
                    return Err(FormatError::corrupt(&p, None, "Index.db is missing"));
                }
                Ok(PartitionSource::Big(p))
            }
            Format::Bti => {
                let (partitions_path, partitions) = read_whole(t, Component::Partitions)?;
                let (rows_path, rows) = read_whole(t, Component::Rows)?;
                Ok(PartitionSource::Bti(
                    BtiIndexFiles {
                        partitions_path,
                        partitions,
                        rows_path,
                        rows,
                    },
                    keys,
                ))
            }
        }
    }

    /// A reader from the first partition.
    pub fn reader(&self, t: &SSTable) -> Result<PartitionReader<'_>> {
        match self {
            PartitionSource::Big(p) => Ok(PartitionReader::Big(
                IndexReader::open(p)?.with_data_length(t.data_length()),
            )),
            PartitionSource::Bti(files, keys) => {
                let index = PartitionIndex::parse(&files.partitions_path, &files.partitions)?
                    .with_limits(Some(t.data_length()), Some(files.rows.len() as u64));
                let scan = PartitionScan::new(files, &index, t.data_reader()?, t.partitioner)?
                    .with_keys(keys);
                Ok(PartitionReader::Bti(Box::new(scan)))
            }
        }
    }

    /// A reader from the partition at `offset` (`IndexEntryRef::index_offset` of an
    /// earlier pass): an Index.db offset, or a BTI partition's Data.db position.
    pub fn reader_at(&self, t: &SSTable, offset: u64) -> Result<PartitionReader<'_>> {
        match self {
            PartitionSource::Big(p) => Ok(PartitionReader::Big(
                IndexReader::open_at(p, offset)?.with_data_length(t.data_length()),
            )),
            PartitionSource::Bti(..) => {
                let mut r = self.reader(t)?;
                if let PartitionReader::Bti(s) = &mut r {
                    s.skip_to(offset)?;
                }
                Ok(r)
            }
        }
    }

    /// The span `index_offset`s run over (for progress): Index.db's length, or Data.db's
    /// data length for BTI.
    pub fn span(t: &SSTable) -> u64 {
        match t.descriptor.format {
            Format::Big => t.size_of(&Component::Index).unwrap_or(0),
            Format::Bti => t.data_length(),
        }
    }
}

impl PartitionReader<'_> {
    pub fn next_entry(&mut self) -> Result<Option<IndexEntryRef<'_>>> {
        match self {
            PartitionReader::Big(r) => r.next_entry(),
            PartitionReader::Bti(s) => Ok(s.next_partition()?.map(|p| IndexEntryRef {
                key: p.key,
                position: p.position,
                promoted_index: &[],
                index_offset: p.position,
                row_index: p.row_index,
                prefix: p.prefix,
            })),
        }
    }

    /// Moves a BTI reader forward to the partition at `offset` without re-walking the trie
    /// from its start, and says whether it could (`false`: a BIG reader, whose
    /// `PartitionSource::reader_at` is one seek, or an offset behind the reader). A child of
    /// many runs (a `regrid` child of 256 vnode ranges) reads them in order through one
    /// reader instead of walking the trie once per run.
    pub fn advance_to(&mut self, offset: u64) -> Result<bool> {
        match self {
            PartitionReader::Big(_) => Ok(false),
            PartitionReader::Bti(s) if s.position() <= offset => {
                s.skip_to(offset)?;
                Ok(true)
            }
            PartitionReader::Bti(_) => Ok(false),
        }
    }

    /// Where the reader stands: the next entry's `index_offset` (the span's end after
    /// the last).
    pub fn offset(&self) -> u64 {
        match self {
            PartitionReader::Big(r) => r.offset(),
            PartitionReader::Bti(s) => s.position(),
        }
    }
}

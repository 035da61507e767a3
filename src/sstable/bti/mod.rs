//! Cassandra 5.0's BTI sstables (`da`): the trie-indexed format that replaces BIG's
//! Index.db and Summary.db with Partitions.db and Rows.db. Data.db, CompressionInfo.db,
//! Filter.db and Statistics.db are produced by the same code as BIG `oa`.
//!
//! This module is the format layer only — reading and writing the two index components
//! (`split::child` writes a child's, `sstable::scan` reads a parent's through [`scan`]).
//! The format, cited to Cassandra 5.0's source, is in `../shared/docs/bti-format.md`; what
//! is read, written and verified against which fixtures is in `docs/format.md` and
//! `docs/bti.md`.
//!
//! - [`trie`]: node encodings shared by both files (`TrieNode`), the in-order walk, and the
//!   page-aware trie writer (`IncrementalTrieWriterPageAware`);
//! - [`partitions`]: Partitions.db (`PartitionIndex`, `PartitionIndexBuilder`);
//! - [`rows`]: Rows.db entries (`TrieIndexEntry`, `RowIndexReader`);
//! - [`keys`]: the byte-comparable decorated key the partition trie is keyed by;
//! - [`scan`]: every partition in token order with its full key, read from Data.db or
//!   Rows.db and checked against the trie.

pub mod keys;
pub mod partitions;
pub mod rows;
pub mod scan;
pub(crate) mod trie;

pub use partitions::{Footer, IndexPos, PartitionEntry, PartitionIndex, PartitionIndexWriter};
pub use rows::{DeletionTime, RowBlock, RowIndexEntry, RowsWriter};

#[cfg(test)]
mod fixtures;

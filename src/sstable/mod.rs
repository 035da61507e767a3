//! The SSTable format, BIG versions `ma` (3.0) to `oa` (5.0) and the BTI `da` index
//! components (`bti`, not yet used by split): pure parsing and
//! serialization of every component, plus the readers that stream Index.db and Data.db.
//!
//! Facts and their Cassandra sources are in `../shared/docs/sstable-format.md`; each module
//! cites the classes it mirrors. Nothing here writes files: values in, bytes out.

pub mod bti;
pub mod bytes;
pub mod cassandra;
pub mod checksum;
pub mod compression;
pub mod data;
pub mod descriptor;
pub mod error;
pub mod filler;
pub mod filter;
pub mod fingerprint;
pub mod hex;
pub mod index;
pub mod lz4;
pub mod murmur;
pub mod release;
pub mod row;
pub mod scan;
pub mod statistics;
pub mod summary;
pub mod table;
pub mod token;
pub mod vint;

pub use descriptor::{Component, Descriptor, Format, SSTableId, Toc, Version};
pub use error::{FormatError, Result};
pub use release::{node_release, NodeRelease, ReleaseScan};
pub use table::SSTable;
pub use token::{Partitioner, Token, TokenRange};

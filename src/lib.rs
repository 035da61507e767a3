//! cleave: split Apache Cassandra SSTables by token range without rewriting rows.
//!
//! Layers point down only: `sstable` (pure format) ← `split` ← `stream`, `operator` ←
//! the binary. Syscalls live in `io`.

pub mod bench;
pub mod gen;
pub mod http;
pub mod io;
pub mod mgmt;
pub mod operator;
pub mod reason;
pub mod split;
pub mod sstable;
pub mod stream;

//! Benchmarks as library code (the CLI only parses their arguments): what they measure and
//! how, kept out of the command-line layer. The syscalls they need (child rusage, page-cache
//! control, statvfs, loop mounts) are in `crate::io`.
//!
//! * [`index`]: `cleave bench index`, Index.db streaming throughput and memory;
//! * [`split`]: `cleave bench split`, the CASSANDRA-21550 table and the sweep;
//! * [`cleanup`]: `cleave bench cleanup`, cleanup against a byte copy of the table;
//! * [`fsync`]: `cleave bench fsync`, durability strategies.

pub mod cleanup;
pub mod fsync;
pub mod index;
mod rng;
mod scratch;
pub mod split;
mod stat;

pub use rng::SplitMix64;
pub use scratch::ScratchDir;
pub use stat::Stat;

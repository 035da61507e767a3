//! Benchmarks as library code (the CLI only parses their arguments): what they measure and
//! how, kept out of the command-line layer. Syscalls they need are in `crate::io`.

pub mod fsync;

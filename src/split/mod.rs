//! Splitting one SSTable into children by token range: `plan` (pure), `execute` (I/O),
//! `publish` (staging, fsync, atomic replace), `verify` (the key fingerprint check).

pub mod child;
pub mod data;
pub mod execute;
pub mod plan;
pub mod publish;
pub mod ranges;
pub mod spec;

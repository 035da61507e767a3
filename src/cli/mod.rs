//! Subcommands: argument parsing and presentation only; the work is in the library.

pub mod bench;
pub mod demo;
pub mod gen;
pub mod inspect;
pub mod progress;
pub mod split;

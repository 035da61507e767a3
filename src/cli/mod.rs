//! Subcommands: argument parsing and presentation only; the work is in the library.

pub mod bench;
pub mod cleanup;
pub mod crd;
pub mod demo;
pub mod failure;
pub mod gen;
pub mod inspect;
pub mod json;
pub mod progress;
pub mod run;
pub mod split;
pub mod stream;
pub mod validate;

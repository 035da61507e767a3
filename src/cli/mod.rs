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

use std::path::Path;

/// A stage directory Cassandra 5.0's `nodetool import` lists nothing from
/// (`split::import_dir`): said on stderr before the run, not refused, since 4.0 and 4.1
/// import from it and the children may be meant for them.
pub(crate) fn warn_if_5_0_import_skips(out: &Path) {
    let abs = out
        .canonicalize()
        .or_else(|_| std::path::absolute(out))
        .unwrap_or_else(|_| out.to_path_buf());
    if !cleave::split::import_dir::importable_by_5_0(&abs) {
        eprintln!(
            "cleave: warning: Cassandra 5.0's nodetool import skips every sstable in {} and exits 0 (it parses <keyspace>/<table> from the last two directory names, and a '-' there that is not <table>-<id> fails the parse); stage into a directory ending in <keyspace>/<table> for a 5.0 node (4.0 and 4.1 import from any directory)",
            abs.display()
        );
    }
}

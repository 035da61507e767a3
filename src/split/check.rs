//! `Staged::check`: the children must add up to the parent — (count, XOR, sum) of every
//! key's Murmur3 as written equals the parent's — and each child, reopened from staging,
//! passes the index-level check (order, positions, Summary vs Index, every key in the
//! Bloom filter, `oa` first/last key) and has its first and last partition key at their
//! positions in Data.db. Any failure drops the `Staged`, which removes staging.

use super::error::CheckError;
use super::plan::PlanSource;
use super::staged::{Checked, Staged, Unchecked};
use super::trie_only;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::table::{CheckLevel, CheckReport};
use crate::sstable::{hex, Component, FormatError, SSTable};

impl Staged<Unchecked> {
    pub fn check(self) -> Result<Staged<Checked>, CheckError> {
        if self.children_fp != self.parent_fp {
            return Err(CheckError::Fingerprint {
                path: self.parent.data_path().to_path_buf(),
                parent: self.parent_fp,
                children: self.children_fp,
            });
        }
        let mut recheck = Fingerprint::default();
        for (d, c) in self.descs.iter().zip(&self.plan) {
            let path = d.path(&Component::Data);
            let child = SSTable::open(&path).map_err(|source| CheckError::Child {
                path: path.clone(),
                what: "does not open",
                source,
            })?;
            let rep = match self.plan_source {
                PlanSource::PartitionsTrie => trie_only::check_child(&child, c),
                _ => child.check(CheckLevel::Index, &mut |_| {}),
            }
            .map_err(|source| CheckError::Child {
                path: path.clone(),
                what: "fails its check",
                source,
            })?;
            boundary_check(&child, &rep).map_err(|source| CheckError::Child {
                path: path.clone(),
                what: "data does not match its index",
                source,
            })?;
            recheck.merge(&rep.fingerprint);
        }
        if recheck != self.parent_fp {
            return Err(CheckError::Fingerprint {
                path: self.staging.clone(),
                parent: self.parent_fp,
                children: recheck,
            });
        }
        Ok(self.into_state())
    }
}

/// Reads the first and the last partition's key at their positions in the child's Data.db:
/// cheap (one or two chunks) and catches any wrong base, dead prefix or tail. The keys and
/// positions are the ones the check just read from the child's Index.db (`CheckReport`), so
/// Index.db is read once.
fn boundary_check(child: &SSTable, rep: &CheckReport) -> Result<(), FormatError> {
    let mut d = child.data_reader()?;
    let first = rep.first_position.map(|p| (&rep.first_key, p));
    let last = rep.last_position.map(|p| (&rep.last_key, p));
    for (key, pos) in first.into_iter().chain(last) {
        let head = d.read_at(pos, 2 + key.len())?;
        if head[..2] != (key.len() as u16).to_be_bytes() || head[2..] != key[..] {
            return Err(FormatError::corrupt(
                &child.path(&Component::Data),
                Some(pos),
                format!(
                    "expected partition key {}, found {}",
                    hex::encode(key),
                    hex::encode(&head)
                ),
            ));
        }
    }
    Ok(())
}

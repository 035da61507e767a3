//! `IndexProbe` over the parent's files: Summary.db's samples in memory (the sampled
//! index: 1/`minIndexInterval` of Index.db's entries), Index.db by point reads from a
//! sample's offset. Every entry read checks the assumption the sampled plan rests on:
//! partition `j · interval` is sample `j` (same key, same Index.db offset).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use super::sampled::{IndexProbe, ProbeEntry, ProbeError};
use crate::sstable::index::{IndexReader, ReadAt};
use crate::sstable::summary::{Summary, BASE_SAMPLING_LEVEL};
use crate::sstable::{hex, Component, Partitioner, SSTable, Token};

/// Buffer of a scan from a sample: one interval of ordinary entries fits.
const SCAN_BUFFER: usize = 16 * 1024;
/// Buffer of a point read of one entry (grown for a larger one).
const POINT_BUFFER: usize = 512;

pub struct FileProbe<'f> {
    path: PathBuf,
    file: &'f File,
    file_len: u64,
    data_length: u64,
    partitioner: Partitioner,
    summary: Summary,
    tokens: Vec<Token>,
    positions: HashMap<usize, u64>,
    reader: Option<IndexReader<ReadAt<'f>>>,
    ordinal: u64,
}

impl<'f> FileProbe<'f> {
    /// A probe when Summary.db is there and at full sampling with increasing offsets from
    /// 0; `None` otherwise (a missing, unreadable or downsampled summary: the caller plans
    /// with the full pass, which needs no summary). `index` is Index.db, opened.
    pub fn new(t: &SSTable, index: &'f File) -> Option<FileProbe<'f>> {
        let summary = t.summary().ok().flatten()?;
        let regular = summary.sampling_level == BASE_SAMPLING_LEVEL
            && summary.min_index_interval > 0
            && !summary.entries.is_empty()
            && summary.size_at_full_sampling as usize == summary.entries.len()
            && summary.entries[0].index_position == 0
            && summary
                .entries
                .windows(2)
                .all(|w| w[0].index_position < w[1].index_position);
        if !regular {
            return None;
        }
        let file_len = t.size_of(&Component::Index)?;
        if summary
            .entries
            .last()
            .is_some_and(|e| e.index_position as u64 >= file_len)
        {
            return None;
        }
        let tokens = summary
            .entries
            .iter()
            .map(|e| t.partitioner.token(&e.key))
            .collect();
        Some(FileProbe {
            path: t.path(&Component::Index),
            file: index,
            file_len,
            data_length: t.data_length(),
            partitioner: t.partitioner,
            summary,
            tokens,
            positions: HashMap::new(),
            reader: None,
            ordinal: 0,
        })
    }

    fn reader_at(&self, j: usize, buffer: usize) -> IndexReader<ReadAt<'f>> {
        IndexReader::at(
            &self.path,
            self.file,
            self.file_len,
            self.summary.entries[j].index_position as u64,
            buffer,
        )
        .with_data_length(self.data_length)
    }

    fn irregular(&self, what: String) -> ProbeError {
        ProbeError::Irregular(format!("{}: {what}", summary_path(&self.path).display()))
    }
}

fn summary_path(index: &Path) -> PathBuf {
    let name = index
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.replace("Index.db", "Summary.db"))
        .unwrap_or_default();
    index.with_file_name(name)
}

impl IndexProbe for FileProbe<'_> {
    fn interval(&self) -> u64 {
        self.summary.min_index_interval as u64
    }
    fn samples(&self) -> usize {
        self.summary.entries.len()
    }
    fn sample_token(&self, j: usize) -> &Token {
        &self.tokens[j]
    }
    fn sample_position(&mut self, j: usize) -> Result<u64, ProbeError> {
        if let Some(p) = self.positions.get(&j) {
            return Ok(*p);
        }
        let mut r = self.reader_at(j, POINT_BUFFER);
        let Some(e) = r.next_entry()? else {
            return Err(self.irregular(format!("sample {j} points past the end of Index.db")));
        };
        if e.key != self.summary.entries[j].key.as_slice() {
            return Err(self.irregular(format!(
                "sample {j} names key {}, Index.db has {} there",
                hex::encode(&self.summary.entries[j].key),
                hex::encode(e.key)
            )));
        }
        let p = e.position;
        self.positions.insert(j, p);
        Ok(p)
    }
    fn seek(&mut self, j: usize) -> Result<(), ProbeError> {
        self.reader = Some(self.reader_at(j, SCAN_BUFFER));
        self.ordinal = j as u64 * self.interval();
        Ok(())
    }
    fn next(&mut self) -> Result<Option<ProbeEntry>, ProbeError> {
        let interval = self.interval();
        let Some(r) = self.reader.as_mut() else {
            return Ok(None);
        };
        let Some(e) = r.next_entry()? else {
            return Ok(None);
        };
        let ordinal = self.ordinal;
        self.ordinal += 1;
        let entry = ProbeEntry {
            ordinal,
            key: e.key.to_vec(),
            token: self.partitioner.token(e.key),
            position: e.position,
            index_offset: e.index_offset,
        };
        if ordinal.is_multiple_of(interval) {
            let j = (ordinal / interval) as usize;
            let ok = self.summary.entries.get(j).is_some_and(|s| {
                s.index_position as u64 == entry.index_offset && s.key == entry.key
            });
            if !ok {
                return Err(self.irregular(format!(
                    "partition {ordinal} (Index.db offset {}) is not sample {j}: the samples are not every {interval} partitions",
                    entry.index_offset
                )));
            }
        }
        Ok(Some(entry))
    }
}

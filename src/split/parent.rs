//! The parent sstable, opened once per split: its components, its Data.db handle, CRC.db,
//! the filesystem it lives on and whether that filesystem shares extents. Everything after
//! (`plan`, `write`, the stream sender) borrows these facts instead of reopening the files.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::error::{OpenError, PlanError};
use super::plan::{self, Grid, Grouper, Plan, PlanSource, Policy};
use super::probe::FileProbe;
use super::sampled::{self, ProbeError};
use super::spec::{validate_boundaries, Cut};
use crate::io::reflink::{self, CloneRefusal, ReflinkSupport};
use crate::sstable::bti::scan::KeyMode;
use crate::sstable::checksum::ChunkChecksums;
use crate::sstable::compression::Codec;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::scan::PartitionSource;
use crate::sstable::{Component, Format, FormatError, SSTable};

struct Inner {
    table: SSTable,
    data_path: PathBuf,
    data_file: File,
    crc: Option<ChunkChecksums>,
    dir: PathBuf,
    device: u64,
    /// From the filesystem type, without writing: what planning assumes.
    reflink_guess: ReflinkSupport,
    /// The real probe, made once, the first time a write needs it.
    reflink_probed: OnceLock<ReflinkSupport>,
    /// Leading empty partitions (fillers of an earlier split): not keys of the table.
    leading_empty: u64,
}

/// A parent sstable opened for splitting. Cheap to clone (shared).
#[derive(Clone)]
pub struct Parent {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parent")
            .field("data", &self.inner.data_path)
            .finish()
    }
}

impl Parent {
    /// Opens the sstable `path` (any of its components) and checks that cleave can split
    /// it: no per-sstable secondary index, a codec cleave can re-encode.
    pub fn open(path: &Path) -> Result<Parent, OpenError> {
        let table = SSTable::open(path)?;
        let data_path = table.path(&Component::Data);
        if let Some((c, _)) = table.files.iter().find(|(c, _)| c.is_secondary_index()) {
            return Err(OpenError::SecondaryIndex {
                path: data_path,
                component: c.file_name().to_string(),
            });
        }
        if let Some(ci) = &table.compression {
            let info = table.path(&Component::CompressionInfo);
            match ci.codec() {
                Codec::Unknown => {
                    return Err(OpenError::Compressor {
                        path: info,
                        compressor: ci.compressor.clone(),
                    })
                }
                // A level ZstdCompressor itself would refuse: the chunks cleave writes
                // could not be written the way the table's compressor writes them.
                Codec::Zstd => {
                    ci.zstd_level(&info)?;
                }
                _ => {}
            }
        }
        let crc = table.chunk_checksums()?;
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| OpenError::Io { path: p, source }
        };
        let data_file = File::open(&data_path).map_err(io(&data_path))?;
        let dir = data_path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let device = crate::io::fs::device_of(&dir).map_err(io(&dir))?;
        let reflink_guess = crate::io::fs::guess_reflink(&dir);
        let leading_empty = table.leading_empty_partitions()?;
        Ok(Parent {
            inner: Arc::new(Inner {
                leading_empty,
                table,
                data_path,
                data_file,
                crc,
                dir,
                device,
                reflink_guess,
                reflink_probed: OnceLock::new(),
            }),
        })
    }

    pub fn table(&self) -> &SSTable {
        &self.inner.table
    }
    /// Entries at the start of Index.db that are an earlier split's fillers.
    pub fn leading_empty(&self) -> u64 {
        self.inner.leading_empty
    }
    pub fn data_path(&self) -> &Path {
        &self.inner.data_path
    }
    pub fn data_file(&self) -> &File {
        &self.inner.data_file
    }
    pub fn crc(&self) -> Option<&ChunkChecksums> {
        self.inner.crc.as_ref()
    }
    /// The table directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }
    pub fn device(&self) -> u64 {
        self.inner.device
    }
    /// The CRC.db block of an uncompressed parent (64 KiB when it has none).
    pub fn crc_unit(&self) -> u64 {
        self.inner
            .crc
            .as_ref()
            .map_or(64 * 1024, |c| c.chunk_size as u64)
    }
    /// The grid unit: chunk length, or the CRC.db block for uncompressed parents.
    pub fn unit(&self) -> u64 {
        self.inner
            .table
            .compression
            .as_ref()
            .map_or(self.crc_unit(), |c| c.chunk_length as u64)
    }
    /// Whether the filesystem shares extents, from its type (no write).
    pub fn reflink_guess(&self) -> ReflinkSupport {
        self.inner.reflink_guess
    }
    /// Whether extents of Data.db can be shared into new files in `dir` (on the parent's
    /// filesystem): probed once by cloning a block into a scratch file there.
    pub fn reflink_probe(&self, dir: &Path) -> std::io::Result<ReflinkSupport> {
        if let Some(r) = self.inner.reflink_probed.get() {
            return Ok(*r);
        }
        let r = reflink::probe(&self.inner.data_file, dir)?;
        Ok(*self.inner.reflink_probed.get_or_init(|| r))
    }

    /// The plan of a split, writing nothing: from Summary.db's samples and point reads of
    /// Index.db when the summary is at full sampling (`split::sampled`: a few intervals of
    /// entries per cut, so the split's one pass over Index.db is the write's), else from
    /// one streaming pass over Index.db (`Grouper`, memory O(children + runs)). Both give
    /// the same children. The reflink support is the probed one if a write probed it
    /// already, else the filesystem type's.
    pub fn plan(&self, cut: &Cut, policy: &Policy) -> Result<Plan, PlanError> {
        self.plan_with_progress(cut, policy, &mut |_, _| {})
    }

    /// `plan`, reporting Index.db bytes read (done, total).
    pub fn plan_with_progress(
        &self,
        cut: &Cut,
        policy: &Policy,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Plan, PlanError> {
        self.plan_from(cut, policy, None, progress)
    }

    /// `plan` with the full pass over Index.db, whatever the summary (what `plan` falls
    /// back to; tests compare the two).
    pub fn plan_index_pass(&self, cut: &Cut, policy: &Policy) -> Result<Plan, PlanError> {
        self.plan_from(cut, policy, Some(PlanSource::IndexPass), &mut |_, _| {})
    }

    fn plan_from(
        &self,
        cut: &Cut,
        policy: &Policy,
        force: Option<PlanSource>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Plan, PlanError> {
        let t = &self.inner.table;
        let invalid = |message: String| PlanError::Invalid {
            path: self.inner.data_path.clone(),
            message,
        };
        match cut {
            Cut::Tokens(b) => validate_boundaries(t.partitioner, b).map_err(invalid)?,
            Cut::Parts(0) => return Err(invalid("--parts 0: expected at least 2".into())),
            Cut::Parts(_) => {}
            Cut::Ranges(r) => r.validate(t.partitioner).map_err(invalid)?,
            Cut::Owned(o) => o.validate(t.partitioner).map_err(invalid)?,
        }
        let support = self
            .inner
            .reflink_probed
            .get()
            .copied()
            .unwrap_or(self.inner.reflink_guess);
        let (block, no_share) = split_support(support);
        let unit = self.unit();
        let index_total = PartitionSource::span(t);
        let started = Instant::now();
        let min_dead = plan::preferred_dead_prefix(if block > 0 { block } else { 4096 });
        let shape = sampled::Shape {
            partitioner: t.partitioner,
            data_length: t.data_length(),
            index_length: index_total,
            grid: unit,
            min_dead_prefix: min_dead,
            merge_below_units: policy.merge_below_chunks,
        };
        let from_samples = if force == Some(PlanSource::IndexPass) {
            None
        } else {
            self.children_from_samples(cut, shape)?
        };
        // A BTI parent of Murmur3 keys is planned from its trie unless asked otherwise; an
        // earlier split's fillers are told apart by their keys, so such a parent reads them.
        let trie_only = force.is_none()
            && t.descriptor.format == Format::Bti
            && t.partitioner == crate::sstable::Partitioner::Murmur3
            && self.inner.leading_empty == 0
            && policy.bti_keys == plan::BtiKeys::Trie;
        let (children, partitions, fingerprint, source) = match from_samples {
            Some((children, partitions)) => {
                progress(index_total, index_total);
                (children, partitions, None, PlanSource::SummarySamples)
            }
            None => {
                let keys = if trie_only {
                    super::trie_only::key_mode(cut)
                } else {
                    KeyMode::Every
                };
                let (mut children, fp) =
                    self.children_from_index_pass(cut, shape, keys, progress)?;
                let source = if trie_only {
                    super::trie_only::fill_run_keys(t, &mut children)?;
                    PlanSource::PartitionsTrie
                } else {
                    PlanSource::IndexPass
                };
                // Index.db's entries: the keys plus an earlier split's fillers.
                let n = fp.count + self.inner.leading_empty;
                (children, n, Some(fp), source)
            }
        };
        if partitions == 0 {
            return Err(PlanError::NoPartitions {
                path: self.inner.data_path.clone(),
            });
        }
        let grid = Grid {
            unit,
            block,
            no_share,
            lz4: t
                .compression
                .as_ref()
                .is_some_and(|c| c.codec() == Codec::Lz4),
        };
        // The few offsets the plan reads, fetched once (the parent's may be on disk).
        let fetched = match &t.compression {
            Some(c) => {
                let mut f = plan::FetchedOffsets {
                    count: c.offsets.len() as u64,
                    ..Default::default()
                };
                for i in plan::offsets_needed(&children, unit) {
                    if let Some(o) = c.offsets.get(i as usize)? {
                        f.offsets.insert(i, o);
                    }
                }
                Some(f)
            }
            None => None,
        };
        let compression = fetched
            .as_ref()
            .map(|f| (f as &dyn plan::OffsetLookup, t.data_file_size));
        let mut children = plan::resolve(children, policy, grid, compression);
        let header = t.statistics.header.as_ref();
        super::head::fill(
            &mut children,
            cut,
            &super::head::Facts {
                target: policy.target,
                partitioner: t.partitioner,
                version: t.descriptor.version,
                key_type: header.map(|h| h.key_type.as_str()),
                has_static_columns: header.is_some_and(|h| !h.static_columns.is_empty()),
                row_shape: header.map(|h| crate::sstable::filler::RowShape {
                    clustering: h.clustering_types.len(),
                    statics: h.static_columns.len(),
                    regular: h.regular_columns.len(),
                }),
                unit,
                compressed: t.compression.is_some(),
            },
        );
        Ok(Plan {
            parent: self.clone(),
            cut: cut.clone(),
            policy: policy.clone(),
            grid,
            children,
            partitions,
            fingerprint,
            source,
            index_pass: started.elapsed(),
        })
    }

    /// Children from Summary.db's samples, or `None` when the summary cannot serve (absent,
    /// downsampled, or its samples turn out irregular): then the full pass plans.
    fn children_from_samples(
        &self,
        cut: &Cut,
        shape: sampled::Shape,
    ) -> Result<Option<(Vec<plan::PlannedChild>, u64)>, PlanError> {
        let t = &self.inner.table;
        // BTI has no Summary.db to sample: its plan is always the full pass.
        if t.descriptor.format == Format::Bti {
            return Ok(None);
        }
        let index_path = t.path(&Component::Index);
        let f = File::open(&index_path).map_err(|e| FormatError::io(&index_path, e))?;
        let Some(mut probe) = FileProbe::new(t, &f) else {
            return Ok(None);
        };
        match sampled::plan(&mut probe, cut, shape) {
            Ok(s) => Ok(Some((s.children, s.partitions))),
            Err(ProbeError::Irregular(why)) => {
                tracing::debug!(parent = %self.inner.data_path.display(), %why, "planning with the full index pass");
                Ok(None)
            }
            Err(ProbeError::Index(e)) => Err(e.into()),
        }
    }

    /// Children from one streaming pass over Index.db, with the parent's key fingerprint.
    fn children_from_index_pass(
        &self,
        cut: &Cut,
        shape: sampled::Shape,
        keys: KeyMode,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(Vec<plan::PlannedChild>, Fingerprint), PlanError> {
        let t = &self.inner.table;
        let mut grouper = Grouper::new(
            cut.clone(),
            t.partitioner,
            shape.data_length,
            shape.grid,
            shape.min_dead_prefix,
        );
        let mut fingerprint = Fingerprint::default();
        let src = PartitionSource::with_keys(t, keys)?;
        let mut r = src.reader(t)?;
        let mut last = 0;
        let mut ordinal = 0u64;
        let index_path = t.path(&t.partition_index());
        while let Some(e) = r.next_entry()? {
            let token = super::trie_only::token(&e, t.partitioner, &index_path)?;
            grouper.push(e.key, &token, e.position, e.index_offset);
            if ordinal >= self.inner.leading_empty {
                match e.prefix {
                    Some(p) => fingerprint.add(&super::trie_only::identity(e.position, p.hash)),
                    None => fingerprint.add(e.key),
                }
            }
            ordinal += 1;
            if e.index_offset - last > (1 << 20) {
                progress(e.index_offset, shape.index_length);
                last = e.index_offset;
            }
        }
        progress(shape.index_length, shape.index_length);
        if fingerprint.count == 0 {
            return Err(PlanError::NoPartitions {
                path: self.inner.data_path.clone(),
            });
        }
        Ok((
            grouper.finish(shape.merge_below_units, shape.index_length),
            fingerprint,
        ))
    }
}

/// (block, why not) of a support answer: block 0 means nothing is shared.
pub fn split_support(s: ReflinkSupport) -> (u64, Option<CloneRefusal>) {
    match s {
        ReflinkSupport::Supported { block_size } => (block_size, None),
        ReflinkSupport::Refused(r) => (0, Some(r)),
    }
}

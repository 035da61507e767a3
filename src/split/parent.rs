//! The parent sstable, opened once per split: its components, its Data.db handle, CRC.db,
//! the filesystem it lives on and whether that filesystem shares extents. Everything after
//! (`plan`, `write`, the stream sender) borrows these facts instead of reopening the files.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::error::{OpenError, PlanError};
use super::plan::{self, Grid, Grouper, Plan, Policy};
use super::spec::{validate_boundaries, Cut};
use crate::io::reflink::{self, CloneRefusal, ReflinkSupport};
use crate::sstable::checksum::ChunkChecksums;
use crate::sstable::compression::Codec;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::{Component, SSTable};

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
            if matches!(ci.codec(), Codec::Zstd | Codec::Unknown) {
                return Err(OpenError::Compressor {
                    path: table.path(&Component::CompressionInfo),
                    compressor: ci.compressor.clone(),
                });
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
        Ok(Parent {
            inner: Arc::new(Inner {
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

    /// The plan of a split: one streaming pass over Index.db groups partitions into
    /// children (memory O(children + runs)), then each child's layout is resolved. Writes
    /// nothing; the reflink support is the probed one if a write probed it already, else
    /// the filesystem type's.
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
        let t = &self.inner.table;
        let invalid = |message: String| PlanError::Invalid {
            path: self.inner.data_path.clone(),
            message,
        };
        match cut {
            Cut::Tokens(b) => validate_boundaries(t.partitioner, b).map_err(invalid)?,
            Cut::Parts(n) if *n < 2 => {
                return Err(invalid(format!("--parts {n}: expected at least 2")))
            }
            Cut::Parts(_) => {}
            Cut::Ranges(r) => r.validate(t.partitioner).map_err(invalid)?,
        }
        let support = self
            .inner
            .reflink_probed
            .get()
            .copied()
            .unwrap_or(self.inner.reflink_guess);
        let (block, no_share) = split_support(support);
        let unit = self.unit();
        let index_total = t.size_of(&Component::Index).unwrap_or(0);
        let started = Instant::now();
        let min_dead = plan::preferred_dead_prefix(if block > 0 { block } else { 4096 });
        let mut grouper = Grouper::new(cut.clone(), t.partitioner, t.data_length(), unit, min_dead);
        let mut fingerprint = Fingerprint::default();
        let mut r = t.index_reader()?;
        let mut last = 0;
        while let Some(e) = r.next_entry()? {
            let token = t.partitioner.token(e.key);
            grouper.push(e.key, &token, e.position, e.index_offset);
            fingerprint.add(e.key);
            if e.index_offset - last > (1 << 20) {
                progress(e.index_offset, index_total);
                last = e.index_offset;
            }
        }
        progress(index_total, index_total);
        if fingerprint.count == 0 {
            return Err(PlanError::NoPartitions {
                path: self.inner.data_path.clone(),
            });
        }
        let children = grouper.finish(policy.merge_below_chunks, index_total);
        let grid = Grid {
            unit,
            block,
            no_share,
            lz4: t
                .compression
                .as_ref()
                .is_some_and(|c| c.codec() == Codec::Lz4),
        };
        let compression = t
            .compression
            .as_ref()
            .map(|c| (c.offsets.as_slice(), t.data_file_size));
        let children = plan::resolve(children, policy, grid, compression);
        Ok(Plan {
            parent: self.clone(),
            cut: cut.clone(),
            policy: policy.clone(),
            grid,
            children,
            fingerprint,
            index_pass: started.elapsed(),
        })
    }
}

/// (block, why not) of a support answer: block 0 means nothing is shared.
pub fn split_support(s: ReflinkSupport) -> (u64, Option<CloneRefusal>) {
    match s {
        ReflinkSupport::Supported { block_size } => (block_size, None),
        ReflinkSupport::Refused(r) => (0, Some(r)),
    }
}

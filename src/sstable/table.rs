//! One SSTable on disk: its descriptor, the components present, and the metadata every
//! operation needs (Statistics, partitioner, CompressionInfo), plus a full integrity check.

use std::fs;
use std::path::{Path, PathBuf};

use super::checksum::{ChunkChecksums, Digest};
use super::compression::CompressionInfo;
use super::data::DataReader;
use super::descriptor::{Component, Descriptor, Toc};
use super::error::{FormatError, Result};
use super::filter::BloomFilter;
use super::fingerprint::Fingerprint;
use super::murmur::KeyHash;
use super::scan::PartitionSource;
use super::statistics::Statistics;
use super::summary::Summary;
use super::token::{Partitioner, Token};

#[derive(Debug, Clone)]
pub struct SSTable {
    pub descriptor: Descriptor,
    pub toc: Option<Toc>,
    /// Components found on disk with their sizes, in TOC-independent order.
    pub files: Vec<(Component, u64)>,
    pub statistics: Statistics,
    pub partitioner: Partitioner,
    pub compression: Option<CompressionInfo>,
    pub data_file_size: u64,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| FormatError::io(path, e))
}

/// Every file of an sstable must be a regular file: a symlink may point anywhere
/// (`/etc/passwd`, `/dev/zero`, another table), a FIFO blocks its reader forever, and a
/// split renames and deletes these names. The error says what the name really is.
fn not_regular(path: &Path, meta: &fs::Metadata) -> FormatError {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_symlink() {
        match fs::read_link(path) {
            Ok(to) => format!("a symbolic link to {}", to.display()),
            Err(_) => "a symbolic link".to_string(),
        }
    } else if t.is_dir() {
        "a directory".to_string()
    } else if t.is_fifo() {
        "a FIFO".to_string()
    } else if t.is_socket() {
        "a socket".to_string()
    } else if t.is_block_device() || t.is_char_device() {
        "a device".to_string()
    } else {
        "not a regular file".to_string()
    };
    FormatError::corrupt(
        path,
        None,
        format!("is {what}, not a regular file: cleave reads only regular sstable files"),
    )
}

/// Components whose absence, when TOC.txt lists them, hides corruption or changes how
/// Data.db is read. Summary.db and Filter.db are not among them: Cassandra rebuilds both
/// when they are missing (`SSTableReader.load` regenerates the summary, a missing filter
/// loads as always-present), and so does a split.
fn required_when_listed(c: &Component) -> bool {
    matches!(
        c,
        Component::Data
            | Component::Index
            | Component::Statistics
            | Component::CompressionInfo
            | Component::Crc
            | Component::Digest
    )
}

fn why_required(c: &Component) -> &'static str {
    match c {
        Component::CompressionInfo => "without it Data.db would be read as uncompressed",
        Component::Crc => "without it Data.db's blocks cannot be checked",
        Component::Digest => "without it the whole-file checksum cannot be checked",
        _ => "the sstable cannot be read without it",
    }
}

impl SSTable {
    /// Opens the sstable that `path` (any of its components) belongs to.
    pub fn open(path: &Path) -> Result<SSTable> {
        let (descriptor, _) = Descriptor::from_path(path)?;
        descriptor.require_supported()?;
        let dir = if descriptor.dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            descriptor.dir.clone()
        };
        let prefix = descriptor.file_name(&Component::Other(String::new()));
        let mut files = Vec::new();
        let listing = fs::read_dir(&dir).map_err(|e| FormatError::io(&dir, e))?;
        for entry in listing {
            let entry = entry.map_err(|e| FormatError::io(&dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(component) = name.strip_prefix(&prefix) {
                // DirEntry::metadata does not follow symlinks: a link is seen as a link.
                let meta = entry
                    .metadata()
                    .map_err(|e| FormatError::io(&entry.path(), e))?;
                if !meta.is_file() {
                    return Err(not_regular(&entry.path(), &meta));
                }
                files.push((Component::parse(component), meta.len()));
            }
        }
        files.sort();
        let size_of = |c: &Component| files.iter().find(|f| &f.0 == c).map(|f| f.1);
        let toc = match size_of(&Component::Toc) {
            Some(_) => {
                let p = descriptor.path(&Component::Toc);
                Some(Toc::parse(&p, &read(&p)?)?)
            }
            None => None,
        };
        if let Some(toc) = &toc {
            for c in &toc.components {
                if required_when_listed(c) && !files.iter().any(|f| &f.0 == c) {
                    return Err(FormatError::corrupt(
                        &descriptor.path(c),
                        None,
                        format!(
                            "{} is listed in TOC.txt but missing: {}",
                            c.file_name(),
                            why_required(c)
                        ),
                    ));
                }
            }
        }
        let data_path = descriptor.path(&Component::Data);
        let data_file_size = size_of(&Component::Data)
            .ok_or_else(|| FormatError::corrupt(&data_path, None, "Data.db is missing"))?;
        let stats_path = descriptor.path(&Component::Statistics);
        if size_of(&Component::Statistics).is_none() {
            return Err(FormatError::corrupt(&stats_path, None, "Statistics.db is missing (it names the partitioner and carries the serialization header)"));
        }
        let statistics = Statistics::parse(&stats_path, &read(&stats_path)?, descriptor.version)?;
        let validation = statistics.validation.as_ref().ok_or_else(|| {
            FormatError::corrupt(
                &stats_path,
                None,
                "no VALIDATION metadata: the partitioner is unknown",
            )
        })?;
        let partitioner = Partitioner::from_class_name(&validation.partitioner).ok_or_else(|| {
            FormatError::unsupported(
                &stats_path,
                None,
                format!("unsupported partitioner {} (cleave computes Murmur3, Random and ByteOrdered tokens)", validation.partitioner),
            )
        })?;
        let compression = match size_of(&Component::CompressionInfo) {
            Some(_) => {
                let p = descriptor.path(&Component::CompressionInfo);
                let ci = CompressionInfo::open(&p, descriptor.version)?;
                ci.check_data_size(&data_path, data_file_size)?;
                Some(ci)
            }
            None => None,
        };
        Ok(SSTable {
            descriptor,
            toc,
            files,
            statistics,
            partitioner,
            compression,
            data_file_size,
        })
    }

    pub fn path(&self, c: &Component) -> PathBuf {
        self.descriptor.path(c)
    }

    pub fn has(&self, c: &Component) -> bool {
        self.files.iter().any(|f| &f.0 == c)
    }

    pub fn size_of(&self, c: &Component) -> Option<u64> {
        self.files.iter().find(|f| &f.0 == c).map(|f| f.1)
    }

    /// Uncompressed length of Data.db.
    pub fn data_length(&self) -> u64 {
        self.compression
            .as_ref()
            .map_or(self.data_file_size, |c| c.data_length)
    }

    /// Index.db of a BIG sstable (BTI has none: `partition_source` reads either).
    pub fn index_reader(&self) -> Result<super::index::IndexReader<fs::File>> {
        let p = self.path(&Component::Index);
        if !self.has(&Component::Index) {
            return Err(FormatError::corrupt(&p, None, "Index.db is missing"));
        }
        Ok(super::index::IndexReader::open(&p)?.with_data_length(self.data_length()))
    }

    /// The component that lists the partitions: Index.db for BIG, Partitions.db for BTI
    /// (what an error about the partition index names).
    pub fn partition_index(&self) -> Component {
        match self.descriptor.format {
            super::Format::Big => Component::Index,
            super::Format::Bti => Component::Partitions,
        }
    }

    /// The index components a pass over the partitions reads (Index.db; Partitions.db and
    /// Rows.db): the pages a split drops from the cache when it ends.
    pub fn index_paths(&self) -> Vec<PathBuf> {
        match self.descriptor.format {
            super::Format::Big => vec![self.path(&Component::Index)],
            super::Format::Bti => vec![
                self.path(&Component::Partitions),
                self.path(&Component::Rows),
            ],
        }
    }

    /// What every partition is read from, in token order (`scan`): Index.db, or BTI's
    /// Partitions.db and Rows.db read whole.
    pub fn partition_source(&self) -> Result<PartitionSource> {
        PartitionSource::of(self)
    }

    pub fn data_reader(&self) -> Result<DataReader> {
        DataReader::open(&self.path(&Component::Data), self.compression.clone())
    }

    pub fn summary(&self) -> Result<Option<Summary>> {
        if !self.has(&Component::Summary) {
            return Ok(None);
        }
        let p = self.path(&Component::Summary);
        Summary::parse(&p, &read(&p)?).map(Some)
    }

    pub fn filter(&self) -> Result<Option<BloomFilter>> {
        // A zero-length Filter.db means "always present" (FilterComponent).
        if self.size_of(&Component::Filter).unwrap_or(0) == 0 {
            return Ok(None);
        }
        let p = self.path(&Component::Filter);
        BloomFilter::parse(&p, &read(&p)?, self.old_filter_layout()).map(Some)
    }

    /// Whether Filter.db uses the `ma`..`me` word-reversed layout. `na` files from 4.0
    /// pre-releases (recognised by a STATS without isTransient, see `Stats::parse`) still
    /// wrote it: the new serialization arrived later under the same version string.
    pub fn old_filter_layout(&self) -> bool {
        let v = self.descriptor.version;
        v.has_old_bf_format()
            || (v.as_str() == "na"
                && self
                    .statistics
                    .stats
                    .as_ref()
                    .is_some_and(|s| s.is_transient.is_none()))
    }

    pub fn digest(&self) -> Result<Option<Digest>> {
        if !self.has(&Component::Digest) {
            return Ok(None);
        }
        let p = self.path(&Component::Digest);
        Digest::parse(&p, &read(&p)?).map(Some)
    }

    pub fn chunk_checksums(&self) -> Result<Option<ChunkChecksums>> {
        if !self.has(&Component::Crc) {
            return Ok(None);
        }
        let p = self.path(&Component::Crc);
        ChunkChecksums::parse(&p, &read(&p)?).map(Some)
    }

    /// Reads every component and cross-checks them; see `CheckLevel`.
    pub fn check(
        &self,
        level: CheckLevel,
        progress: &mut dyn FnMut(CheckProgress),
    ) -> Result<CheckReport> {
        check(self, level, progress)
    }
}

/// How much of the sstable `check` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckLevel {
    /// Metadata and the Index.db pass (order, positions, Summary, Filter): no Data.db reads.
    Index,
    /// Also every chunk CRC, each partition's key at its index position, CRC.db and the
    /// Digest: reads all of Data.db.
    Full,
}

#[derive(Debug, Clone, Copy)]
pub enum CheckProgress {
    IndexBytes(u64),
    DataBytes(u64),
}

/// What one pass over an sstable saw.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CheckReport {
    /// Partitions with data (the leading empty ones, `empty_partitions`, apart).
    pub partitions: u64,
    /// Empty live partitions at the start of Data.db: dead-prefix fillers
    /// (`sstable::filler`; Cassandra itself never writes one). Not in the fingerprint.
    pub empty_partitions: u64,
    #[serde(serialize_with = "super::hex::serialize")]
    pub first_key: Vec<u8>,
    #[serde(serialize_with = "super::hex::serialize")]
    pub last_key: Vec<u8>,
    pub first_token: Option<String>,
    pub last_token: Option<String>,
    pub first_position: Option<u64>,
    /// Data.db position of the last partition (Index.db's last entry); not reported.
    #[serde(skip)]
    pub last_position: Option<u64>,
    /// Partition count, XOR and sum of every key's Murmur3 (see `Fingerprint`).
    pub fingerprint: Fingerprint,
    pub chunks_checked: u64,
    pub digest_checked: bool,
}

/// Whether the partition of `key` at `position` is empty and live (a dead-prefix filler:
/// Cassandra writes none): LIVE then END_OF_PARTITION, or a row filler (LIVE, empty rows,
/// END_OF_PARTITION; `filler::row_filler`) when `rows` (the header's columns) is known.
fn is_empty_partition_at(
    d: &mut super::data::DataReader,
    version: super::Version,
    rows: Option<&super::filler::RowShape>,
    key: &[u8],
    position: u64,
    data_length: u64,
) -> Result<bool> {
    let avail = data_length.saturating_sub(position);
    let want = 2 + key.len() as u64 + 13;
    let n = want.min(avail);
    if n == 0 {
        return Ok(false);
    }
    let head = d.read_at(position, n as usize)?;
    if !(head.len() > 2 + key.len()
        && head[..2] == (key.len() as u16).to_be_bytes()
        && &head[2..2 + key.len()] == key)
    {
        return Ok(false);
    }
    if super::filler::is_empty_after_key(version, &head[2 + key.len()..]) {
        return Ok(true);
    }
    let Some(rows) = rows else {
        return Ok(false);
    };
    // A row filler is at most a few chunks long; read more until it is decided.
    let mut n = 256u64.max(want);
    loop {
        let m = n.min(avail);
        let b = d.read_at(position, m as usize)?;
        match super::filler::is_row_filler_after_key(version, rows, &b[2 + key.len()..]) {
            Some(decided) => return Ok(decided),
            None if m == avail || m >= ROW_FILLER_READ_LIMIT => return Ok(false),
            None => n = m * 4,
        }
    }
}

/// The most bytes `is_empty_partition_at` reads of one partition (a row filler fills at most
/// a dead prefix and one chunk of lead, chunks being at most a few MiB).
const ROW_FILLER_READ_LIMIT: u64 = 64 << 20;

fn row_shape(t: &SSTable) -> Option<super::filler::RowShape> {
    t.statistics
        .header
        .as_ref()
        .map(|h| super::filler::RowShape {
            clustering: h.clustering_types.len(),
            statics: h.static_columns.len(),
            regular: h.regular_columns.len(),
        })
}

impl SSTable {
    /// How many partitions at the start of Data.db are empty fillers (an earlier split's
    /// `sstable::filler`): splitting such an sstable again keeps them out of the key
    /// fingerprint, as every check does.
    pub fn leading_empty_partitions(&self) -> Result<u64> {
        let mut d = self.data_reader()?;
        let src = self.partition_source()?;
        let mut r = src.reader(self)?;
        let dl = self.data_length();
        let mut n = 0;
        let rows = row_shape(self);
        while let Some(e) = r.next_entry()? {
            if !is_empty_partition_at(
                &mut d,
                self.descriptor.version,
                rows.as_ref(),
                e.key,
                e.position,
                dl,
            )? {
                break;
            }
            n += 1;
        }
        Ok(n)
    }
}

fn check(
    t: &SSTable,
    level: CheckLevel,
    progress: &mut dyn FnMut(CheckProgress),
) -> Result<CheckReport> {
    let index_path = t.path(&t.partition_index());
    let summary = t.summary()?;
    let filter = t.filter()?;
    let mut data = match level {
        CheckLevel::Full => Some(t.data_reader()?),
        CheckLevel::Index => None,
    };
    let mut report = CheckReport::default();
    // Fillers lead Data.db: each leading entry is read until one has data. An index-level
    // check of an sstable whose Data.db does not open sees no filler (the full check and
    // the boundary check read Data.db and report it).
    let mut leading = t.data_reader().ok();
    let rows = row_shape(t);
    let data_length = t.data_length();
    let mut prev: Option<Token> = None;
    let mut summary_next = 0usize;
    let src = t.partition_source()?;
    let mut reader = src.reader(t)?;
    let mut last_offset = 0u64;
    // One hash a key: its token, its fingerprint and its Bloom filter lookup share it.
    let mut prev_key: Vec<u8> = Vec::new();
    while let Some(e) = reader.next_entry()? {
        let hash = KeyHash::of(e.key);
        let token = t.partitioner.token_hashed(e.key, hash);
        if let Some((pt, pk)) = prev.as_ref().map(|p| (p, &prev_key)) {
            let ordered = match pt.cmp(&token) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => pk.as_slice() < e.key,
                std::cmp::Ordering::Greater => false,
            };
            if !ordered {
                return Err(FormatError::corrupt(
                    &index_path,
                    Some(e.index_offset),
                    format!(
                        "key {} (token {token}) does not sort after the previous key {} (token {pt}) for {:?}",
                        super::hex::encode(e.key),
                        super::hex::encode(pk),
                        t.partitioner
                    ),
                ));
            }
        } else {
            report.first_key = e.key.to_vec();
            report.first_token = Some(token.to_string());
            report.first_position = Some(e.position);
        }
        let mut filler = false;
        if let Some(d) = leading.as_mut() {
            filler = is_empty_partition_at(
                d,
                t.descriptor.version,
                rows.as_ref(),
                e.key,
                e.position,
                data_length,
            )?;
            if !filler {
                leading = None;
            }
        }
        if filler {
            report.empty_partitions += 1;
        } else {
            report.fingerprint.add_hash(hash);
            report.partitions += 1;
        }
        if let Some(s) = &summary {
            if let Some(se) = s.entries.get(summary_next) {
                if se.index_position as u64 == e.index_offset {
                    if se.key != e.key {
                        return Err(FormatError::corrupt(
                            &t.path(&Component::Summary),
                            None,
                            format!(
                                "summary entry {summary_next} names key {} at Index.db offset {}, where Index.db has key {}",
                                super::hex::encode(&se.key),
                                e.index_offset,
                                super::hex::encode(e.key)
                            ),
                        ));
                    }
                    summary_next += 1;
                }
            }
        }
        if let Some(f) = &filter {
            if !f.may_contain_hash(hash) {
                return Err(FormatError::corrupt(
                    &t.path(&Component::Filter),
                    None,
                    format!("partition key {} is missing from the Bloom filter (a false negative would hide data)", super::hex::encode(e.key)),
                ));
            }
        }
        // A BTI scan took the key from this very position (`bti::scan`): reading it again
        // would decode every chunk a second time to compare a key with itself.
        if let Some(d) = data
            .as_mut()
            .filter(|_| t.descriptor.format == super::Format::Big)
        {
            let head = d.read_at(e.position, 2 + e.key.len())?;
            if head[..2] != (e.key.len() as u16).to_be_bytes() || &head[2..] != e.key {
                return Err(FormatError::corrupt(
                    &t.path(&Component::Data),
                    Some(e.position),
                    format!(
                        "expected partition key {} (named by Index.db at offset {}), found bytes {}",
                        super::hex::encode(e.key),
                        e.index_offset,
                        super::hex::encode(&head)
                    ),
                ));
            }
        }
        let off = e.index_offset;
        prev = Some(token);
        prev_key.clear();
        prev_key.extend_from_slice(e.key);
        report.last_position = Some(e.position);
        if off - last_offset > (1 << 20) {
            progress(CheckProgress::IndexBytes(off - last_offset));
            last_offset = off;
        }
    }
    if let Some(token) = prev {
        report.last_key = prev_key;
        report.last_token = Some(token.to_string());
    }
    if let Some(s) = &summary {
        if summary_next != s.entries.len() {
            return Err(FormatError::corrupt(
                &t.path(&Component::Summary),
                None,
                format!(
                    "summary entry {summary_next} (Index.db offset {}) matches no Index.db entry",
                    s.entries[summary_next].index_position
                ),
            ));
        }
        if report.partitions + report.empty_partitions > 0
            && (s.first_key != report.first_key || s.last_key != report.last_key)
        {
            return Err(FormatError::corrupt(
                &t.path(&Component::Summary),
                None,
                format!(
                    "first/last key {}/{} differ from Index.db's {}/{}",
                    super::hex::encode(&s.first_key),
                    super::hex::encode(&s.last_key),
                    super::hex::encode(&report.first_key),
                    super::hex::encode(&report.last_key)
                ),
            ));
        }
    }
    if let Some(stats) = &t.statistics.stats {
        if let (Some(fk), Some(lk)) = (&stats.first_key, &stats.last_key) {
            if report.partitions + report.empty_partitions > 0
                && (fk != &report.first_key || lk != &report.last_key)
            {
                return Err(FormatError::corrupt(
                    &t.path(&Component::Statistics),
                    None,
                    format!(
                        "STATS first/last key {}/{} differ from {}'s {}/{}",
                        super::hex::encode(fk),
                        super::hex::encode(lk),
                        t.partition_index().file_name(),
                        super::hex::encode(&report.first_key),
                        super::hex::encode(&report.last_key)
                    ),
                ));
            }
        }
    }
    progress(CheckProgress::IndexBytes(
        PartitionSource::span(t).saturating_sub(last_offset),
    ));
    let Some(mut d) = data else { return Ok(report) };
    if let Some(ci) = t.compression.clone() {
        for i in 0..ci.chunk_count() {
            d.chunk(i)?;
            report.chunks_checked += 1;
            let (s, e) = ci.chunk_span(i, t.data_file_size)?;
            progress(CheckProgress::DataBytes(e - s));
        }
    } else if let Some(crc) = t.chunk_checksums()? {
        let computed = d.block_crc32s(crc.chunk_size)?;
        let n = computed.len();
        // A trailing entry for an empty final block is allowed (a double sync at the end).
        let stored_ok = crc.crcs.len() == n || (crc.crcs.len() == n + 1 && crc.crcs[n] == 0);
        if !stored_ok {
            return Err(FormatError::corrupt(
                &t.path(&Component::Crc),
                None,
                format!(
                    "{} CRCs for {} blocks of {} bytes in Data.db",
                    crc.crcs.len(),
                    n,
                    crc.chunk_size
                ),
            ));
        }
        for (i, (s, c)) in crc.crcs.iter().zip(&computed).enumerate() {
            if s != c {
                return Err(FormatError::Checksum {
                    loc: super::error::Location {
                        file: t.path(&Component::Data),
                        offset: Some(i as u64 * crc.chunk_size as u64),
                    },
                    what: format!("block {i} (CRC.db entry {i})"),
                    stored: *s,
                    computed: *c,
                });
            }
            report.chunks_checked += 1;
        }
    }
    if let Some(digest) = t.digest()? {
        let crc = d.file_crc32(|n| progress(CheckProgress::DataBytes(n)))?;
        if crc != digest.crc32 {
            return Err(FormatError::Checksum {
                loc: super::error::Location {
                    file: t.path(&Component::Digest),
                    offset: None,
                },
                what: "Digest.crc32 (CRC32 of the whole Data.db)".into(),
                stored: digest.crc32,
                computed: crc,
            });
        }
        report.digest_checked = true;
    }
    Ok(report)
}

//! `cleave gen`: writes a valid BIG SSTable of a simple table, the way Cassandra lays it
//! out, as input for tests and benchmarks (the CASSANDRA-21550 table: partitions of N KiB
//! made of rows of M KiB).
//!
//! Schema: `CREATE TABLE ks.t (k blob, c int, v blob, PRIMARY KEY (k, c))`. Keys are 8-byte
//! big-endian numbers mixed by splitmix64, written in token order. Row bytes follow
//! `db/rows/UnfilteredSerializer` and `db/rows/Cell.Serializer`: flags `HAS_TIMESTAMP |
//! HAS_ALL_COLUMNS`, clustering header and the 4-byte `c`, row size and previous-row size
//! (unsigned vints), the timestamp as a delta from the HEADER's EncodingStats (0), then one
//! cell with `USE_ROW_TIMESTAMP` and the value's vint length. Every partition ends with the
//! END_OF_PARTITION byte. Values are windows of a deterministic pool: text-like for
//! `--compressible`, random bytes for `--random` — `row_value` recomputes any of them.
//!
//! Not written: promoted indexes (every partition is unindexed, which every reader accepts)
//! and a populated HyperLogLog sketch (COMPACTION holds an empty sparse sketch, which only
//! under-estimates key counts for Cassandra's bloom-filter sizing in later compactions).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::sstable::bytes::Put;
use crate::sstable::checksum::{ChunkChecksums, Digest};
use crate::sstable::compression::{Codec, CompressionInfo};
use crate::sstable::filter::BloomFilter;
use crate::sstable::index::IndexWriter;
use crate::sstable::statistics::{
    ClusteringBound, ClusteringValue, CommitLogPosition, Compaction, CoveredClustering,
    EstimatedHistogram, HeaderColumn, SerializationHeader, Statistics, Stats, TombstoneHistogram,
    Validation,
};
use crate::sstable::summary::SummaryBuilder;
use crate::sstable::{
    vint, Component, Descriptor, Format, FormatError, Partitioner, Result, SSTableId, Toc, Version,
};

/// `EncodingStats.TIMESTAMP_EPOCH` (2015-09-22 in microseconds).
const TIMESTAMP_EPOCH: i64 = 1_442_880_000_000_000;
/// Every row's write time: 2023-11-14T22:13:20Z in microseconds.
pub const ROW_TIMESTAMP: i64 = 1_700_000_000_000_000;
const POOL_LEN: usize = 8 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Content {
    /// Text-like values (LZ4 compresses them ~2-3×).
    Compressible,
    /// Random bytes (incompressible).
    Random,
}

#[derive(Debug, Clone)]
pub struct GenOptions {
    pub out: PathBuf,
    /// Target uncompressed Data.db bytes.
    pub size: u64,
    pub partition_size: u64,
    pub row_size: u64,
    pub version: Version,
    pub content: Content,
    /// LZ4 chunk length; `None` = uncompressed (CRC.db).
    pub chunk_length: Option<u32>,
    pub partitioner: Partitioner,
    pub generation: u32,
    pub seed: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct GenReport {
    pub data: PathBuf,
    pub schema: PathBuf,
    pub partitions: u64,
    pub rows: u64,
    pub data_length: u64,
    pub data_file_bytes: u64,
    pub seconds: f64,
}

pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The value pool: what every row value is a window of.
pub fn value_pool(content: Content, seed: u64) -> Vec<u8> {
    let mut pool = Vec::with_capacity(POOL_LEN);
    let mut s = seed;
    match content {
        Content::Random => {
            while pool.len() < POOL_LEN {
                s = splitmix64(s);
                pool.extend_from_slice(&s.to_le_bytes());
            }
        }
        Content::Compressible => {
            // Words from a small vocabulary, like log lines or JSON text.
            const WORDS: [&str; 32] = [
                "cassandra ",
                "partition ",
                "token ",
                "range ",
                "repair ",
                "node ",
                "replica ",
                "compaction ",
                "the ",
                "of ",
                "and ",
                "sstable ",
                "chunk ",
                "row ",
                "cell ",
                "value=",
                "\"status\":",
                "\"ok\",",
                "12345 ",
                "2024-01-01T00:00:00Z ",
                "error ",
                "write ",
                "read ",
                "latency_ms=",
                "3.14 ",
                "keyspace ",
                "table ",
                "index ",
                "bloom ",
                "filter ",
                "\n",
                "user_",
            ];
            while pool.len() < POOL_LEN {
                s = splitmix64(s);
                pool.extend_from_slice(WORDS[(s % 32) as usize].as_bytes());
                if s >> 60 == 0 {
                    // A sprinkle of digits keeps it from being too regular.
                    pool.extend_from_slice(format!("{} ", s >> 40).as_bytes());
                }
            }
            pool.truncate(POOL_LEN);
        }
    }
    pool
}

/// The value of row `c` of the partition with key `key`: a window of the pool.
pub fn row_value<'p>(pool: &'p [u8], key: &[u8], c: i32, len: usize) -> &'p [u8] {
    let mut h = 0u64;
    for b in key {
        h = splitmix64(h ^ *b as u64);
    }
    let start = (splitmix64(h ^ c as u64) % (pool.len() - len) as u64) as usize;
    &pool[start..start + len]
}

/// Serialized bytes of one row (flags through the cell), given the previous unfiltered's size.
fn row_bytes(c: i32, value: &[u8], prev_size: u64, out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(value.len() + 16);
    body.put_uvint(0); // timestamp - EncodingStats.minTimestamp
    body.put_u8(0x08); // cell flags: USE_ROW_TIMESTAMP
    body.put_uvint(value.len() as u64);
    body.extend_from_slice(value);
    out.put_u8(0x24); // HAS_TIMESTAMP | HAS_ALL_COLUMNS
    out.put_uvint(0); // clustering header: no null/empty values
    out.put_i32(c); // Int32Type is fixed-length: no length prefix
    out.put_uvint(body.len() as u64 + vint::unsigned_size(prev_size) as u64);
    out.put_uvint(prev_size);
    out.extend_from_slice(&body);
}

/// Chunks Data.db bytes as they come: LZ4 chunks with CRC trailers (compressed in batches
/// on every core, written in order), or plain bytes with CRC.db blocks of 64 KiB.
struct DataSink {
    path: PathBuf,
    out: BufWriter<File>,
    chunk: Option<u32>,
    /// Full chunks waiting to be compressed, and the partial one being filled.
    batch: Vec<Vec<u8>>,
    buf: Vec<u8>,
    offsets: Vec<u64>,
    crcs: Vec<u32>,
    file_pos: u64,
    data_len: u64,
    digest: crc32fast::Hasher,
}

/// What the sink wrote.
struct DataWritten {
    file: File,
    offsets: Vec<u64>,
    crcs: Vec<u32>,
    data_len: u64,
    file_bytes: u64,
    digest: u32,
}

const CRC_BLOCK: usize = 64 * 1024;
const BATCH_CHUNKS: usize = 256;

impl DataSink {
    fn write_file(&mut self, b: &[u8]) -> Result<()> {
        self.out
            .write_all(b)
            .map_err(|e| FormatError::io(&self.path, e))?;
        self.digest.update(b);
        self.file_pos += b.len() as u64;
        Ok(())
    }

    /// Compresses the batch on all cores and writes the chunks in order.
    fn flush_batch(&mut self) -> Result<()> {
        let batch = std::mem::take(&mut self.batch);
        if batch.is_empty() {
            return Ok(());
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 8);
        let per = batch.len().div_ceil(threads);
        let path = self.path.clone();
        let compressed: Vec<Result<Vec<u8>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = batch
                .chunks(per)
                .map(|part| {
                    let path = path.clone();
                    scope.spawn(move || {
                        part.iter()
                            .map(|c| {
                                let mut out = Vec::new();
                                Codec::Lz4.compress(&path, c, &mut out)?;
                                Ok(out)
                            })
                            .collect::<Vec<Result<Vec<u8>>>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        if compressed.len() != batch.len() {
            return Err(FormatError::corrupt(
                &self.path,
                None,
                "a compression thread failed",
            ));
        }
        for payload in compressed {
            let payload = payload?;
            self.offsets.push(self.file_pos);
            let crc = crc32fast::hash(&payload);
            self.write_file(&payload)?;
            self.write_file(&crc.to_be_bytes())?;
        }
        Ok(())
    }

    fn close_unit(&mut self) -> Result<()> {
        let unit = self.unit();
        let buf = std::mem::replace(&mut self.buf, Vec::with_capacity(unit));
        match self.chunk {
            Some(_) => {
                self.batch.push(buf);
                if self.batch.len() >= BATCH_CHUNKS {
                    self.flush_batch()?;
                }
            }
            None => {
                self.crcs.push(crc32fast::hash(&buf));
                self.write_file(&buf)?;
            }
        }
        Ok(())
    }

    fn unit(&self) -> usize {
        self.chunk.map_or(CRC_BLOCK, |c| c as usize)
    }

    fn push(&mut self, mut b: &[u8]) -> Result<()> {
        self.data_len += b.len() as u64;
        while !b.is_empty() {
            let take = b.len().min(self.unit() - self.buf.len());
            self.buf.extend_from_slice(&b[..take]);
            b = &b[take..];
            if self.buf.len() == self.unit() {
                self.close_unit()?;
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<DataWritten> {
        if !self.buf.is_empty() {
            self.close_unit()?;
        }
        self.flush_batch()?;
        self.out
            .flush()
            .map_err(|e| FormatError::io(&self.path, e))?;
        let f = self
            .out
            .into_inner()
            .map_err(|e| FormatError::io(&self.path, e.into_error()))?;
        Ok(DataWritten {
            file: f,
            offsets: self.offsets,
            crcs: self.crcs,
            data_len: self.data_len,
            file_bytes: self.file_pos,
            digest: self.digest.finalize(),
        })
    }
}

fn batch_err(e: crate::io::durable::BatchError) -> FormatError {
    FormatError::io(&e.path, e.source)
}

pub const SCHEMA: &str = "CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};\n\
CREATE TABLE ks.t (k blob, c int, v blob, PRIMARY KEY (k, c));\n";

/// Writes the sstable; `progress` gets uncompressed bytes as they are produced.
pub fn generate(o: &GenOptions, progress: &mut dyn FnMut(u64)) -> Result<GenReport> {
    let started = std::time::Instant::now();
    if !o.version.is_supported_big() {
        return Err(FormatError::unsupported(
            &o.out,
            None,
            format!("version {}", o.version),
        ));
    }
    if o.row_size < 16 || o.partition_size < o.row_size {
        return Err(FormatError::corrupt(
            &o.out,
            None,
            "--row-size must be >= 16 bytes and <= --partition-size",
        ));
    }
    let rows_per_partition = (o.partition_size / o.row_size).max(1) as i32;
    let partitions = (o.size / o.partition_size).max(1);
    // Row overhead: flags, header, c, two vints, timestamp, cell flags, value length.
    let value_len = (o.row_size as usize).saturating_sub(16).max(1);
    let pool = value_pool(o.content, o.seed);

    let desc = Descriptor {
        dir: o.out.clone(),
        version: o.version,
        id: SSTableId::Sequence(o.generation),
        format: Format::Big,
    };
    let data_path = desc.path(&Component::Data);
    if data_path.exists() {
        return Err(FormatError::corrupt(
            &data_path,
            None,
            "already exists; choose another --out or --generation",
        ));
    }
    // Keys in token order (DecoratedKey: token, then key bytes).
    let mut keys: Vec<(crate::sstable::Token, [u8; 8])> = (0..partitions)
        .map(|i| {
            let k = splitmix64(o.seed ^ i.wrapping_mul(0x2545_F491_4F6C_DD1D)).to_be_bytes();
            (o.partitioner.token(&k), k)
        })
        .collect();
    keys.sort();
    keys.dedup_by(|a, b| a.1 == b.1);

    let f = File::create(&data_path).map_err(|e| FormatError::io(&data_path, e))?;
    let mut sink = DataSink {
        path: data_path.clone(),
        out: BufWriter::with_capacity(4 << 20, f),
        chunk: o.chunk_length,
        batch: Vec::new(),
        buf: Vec::with_capacity(o.chunk_length.unwrap_or(CRC_BLOCK as u32) as usize),
        offsets: Vec::new(),
        crcs: Vec::new(),
        file_pos: 0,
        data_len: 0,
        digest: crc32fast::Hasher::new(),
    };
    let index_path = desc.path(&Component::Index);
    let fi = File::create(&index_path).map_err(|e| FormatError::io(&index_path, e))?;
    let mut index = IndexWriter::new(BufWriter::with_capacity(1 << 20, fi), 0);
    let mut summary = SummaryBuilder::new(128);
    let fp = 0.01;
    let mut filter = BloomFilter::with_capacity(keys.len() as u64, fp);
    let mut sizes = EstimatedHistogram::empty(155);
    let mut cells = EstimatedHistogram::empty(118);
    let legacy_deletion = !o.version.has_uint_deletion_time();
    let mut part = Vec::with_capacity(o.partition_size as usize + 4096);
    let mut last_progress = 0u64;
    for (_, key) in &keys {
        part.clear();
        part.put_u16(key.len() as u16);
        part.extend_from_slice(key);
        if legacy_deletion {
            part.put_i32(i32::MAX); // DeletionTime.LIVE: localDeletionTime
            part.put_i64(i64::MIN); // markedForDeleteAt
        } else {
            part.put_u8(0x80); // oa: LIVE in one byte
        }
        let mut prev_row_start = 0usize;
        for c in 0..rows_per_partition {
            let start = part.len();
            row_bytes(
                c,
                row_value(&pool, key, c, value_len),
                (start - prev_row_start) as u64,
                &mut part,
            );
            prev_row_start = start;
        }
        part.put_u8(0x01); // END_OF_PARTITION
        let position = sink.data_len;
        let at = index
            .append(key, position, &[])
            .map_err(|e| FormatError::io(&index_path, e))?;
        summary.add(key, at);
        if let Some(f) = filter.as_mut() {
            f.add(key);
        }
        sizes.add(part.len() as i64);
        cells.add(rows_per_partition as i64);
        sink.push(&part)?;
        if sink.data_len - last_progress >= 64 << 20 {
            progress(sink.data_len - last_progress);
            last_progress = sink.data_len;
        }
    }
    progress(sink.data_len - last_progress);
    let w = index
        .finish()
        .map_err(|e| FormatError::io(&index_path, e))?;
    let fi = w
        .into_inner()
        .map_err(|e| FormatError::io(&index_path, e.into_error()))?;
    // Every file durable together at the end, TOC.txt last (io::durable, as a split does).
    let mut batch = crate::io::durable::Batch::new();
    batch.adopt(&index_path, fi, false);
    let DataWritten {
        file: data_file,
        offsets,
        crcs,
        data_len,
        file_bytes,
        digest,
    } = sink.finish()?;
    batch.adopt(&data_path, data_file, false);
    let mut write_file =
        |path: &Path, bytes: &[u8]| batch.overwrite(path, bytes).map_err(batch_err);

    let mut toc = vec![Component::Data, Component::Index];
    if let Some(chunk) = o.chunk_length {
        let ci = CompressionInfo {
            compressor: "LZ4Compressor".into(),
            options: Vec::new(),
            chunk_length: chunk,
            max_compressed_length: o
                .version
                .has_max_compressed_length()
                .then_some(i32::MAX as u32),
            data_length: data_len,
            offsets: offsets.into(),
        };
        write_file(&desc.path(&Component::CompressionInfo), &ci.serialize()?)?;
        toc.push(Component::CompressionInfo);
    } else {
        write_file(
            &desc.path(&Component::Crc),
            &ChunkChecksums {
                chunk_size: CRC_BLOCK as u32,
                crcs,
            }
            .serialize(),
        )?;
        toc.push(Component::Crc);
    }
    write_file(
        &desc.path(&Component::Summary),
        &summary.finish().serialize(),
    )?;
    toc.push(Component::Summary);
    if let Some(f) = &filter {
        write_file(
            &desc.path(&Component::Filter),
            &f.serialize(o.version.has_old_bf_format()),
        )?;
        toc.push(Component::Filter);
    }
    let v = o.version;
    let rows = keys.len() as u64 * rows_per_partition as u64;
    let first_key = keys.first().map(|k| k.1.to_vec()).unwrap_or_default();
    let last_key = keys.last().map(|k| k.1.to_vec()).unwrap_or_default();
    let int32 = "org.apache.cassandra.db.marshal.Int32Type".to_string();
    let no_deletion = if v.has_uint_deletion_time() {
        u32::MAX as i64
    } else {
        i32::MAX as i64
    };
    let stats = Stats {
        partition_sizes: sizes,
        cells_per_partition: cells,
        commit_log_upper_bound: CommitLogPosition::default(),
        min_timestamp: ROW_TIMESTAMP,
        max_timestamp: ROW_TIMESTAMP,
        min_local_deletion_time: no_deletion,
        max_local_deletion_time: no_deletion,
        min_ttl: 0,
        max_ttl: 0,
        compression_ratio: if o.chunk_length.is_some() {
            file_bytes as f64 / data_len as f64
        } else {
            -1.0
        },
        tombstone_drop_times: TombstoneHistogram {
            max_bin_size: 100,
            bins: Vec::new(),
        },
        sstable_level: 0,
        repaired_at: 0,
        legacy_min_clustering: v
            .has_legacy_min_max()
            .then(|| vec![0i32.to_be_bytes().to_vec()]),
        legacy_max_clustering: v
            .has_legacy_min_max()
            .then(|| vec![(rows_per_partition - 1).to_be_bytes().to_vec()]),
        covered_clustering: v.has_improved_min_max().then(|| CoveredClustering {
            types: vec![int32.clone()],
            start: ClusteringBound {
                kind: 1,
                values: vec![ClusteringValue::Value(0i32.to_be_bytes().to_vec())],
            },
            end: ClusteringBound {
                kind: 6,
                values: vec![ClusteringValue::Value(
                    (rows_per_partition - 1).to_be_bytes().to_vec(),
                )],
            },
        }),
        has_legacy_counter_shards: false,
        total_columns_set: rows as i64,
        total_rows: rows as i64,
        commit_log_lower_bound: v
            .has_commit_log_lower_bound()
            .then(CommitLogPosition::default),
        commit_log_intervals: v.has_commit_log_intervals().then(Vec::new),
        pending_repair: v.has_pending_repair().then_some(None),
        is_transient: v.has_pending_repair().then_some(false),
        originating_host_id: v.has_originating_host_id().then_some(None),
        has_partition_level_deletions: v.has_partition_level_deletions_marker().then_some(false),
        first_key: v.has_key_range().then(|| first_key.clone()),
        last_key: v.has_key_range().then(|| last_key.clone()),
        token_space_coverage: v.has_token_space_coverage().then_some(f64::NAN),
    };
    // An empty sparse HyperLogLog++ (stream-lib 2.5.2 getBytes: version -2, p=13, sp=25,
    // format SPARSE, 0 entries).
    let mut hll = Vec::new();
    hll.put_i32(-2);
    hll.extend_from_slice(&[13, 25, 1, 0]);
    let statistics = Statistics {
        validation: Some(Validation {
            partitioner: o.partitioner.class_name().into(),
            bloom_filter_fp_chance: fp,
        }),
        compaction: Some(Compaction::from_cardinality(&hll)),
        stats: Some(stats),
        header: Some(SerializationHeader {
            min_timestamp_delta: (ROW_TIMESTAMP - TIMESTAMP_EPOCH) as u64,
            min_local_deletion_time_delta: 0,
            min_ttl_delta: 0,
            key_type: "org.apache.cassandra.db.marshal.BytesType".into(),
            clustering_types: vec![int32],
            static_columns: Vec::new(),
            regular_columns: vec![HeaderColumn {
                name: b"v".to_vec(),
                type_name: "org.apache.cassandra.db.marshal.BytesType".into(),
            }],
        }),
        toc_order: Vec::new(),
        stats_padding: 0,
    };
    write_file(&desc.path(&Component::Statistics), &statistics.serialize(v))?;
    toc.push(Component::Statistics);
    write_file(
        &desc.path(&Component::Digest),
        &Digest { crc32: digest }.serialize(),
    )?;
    toc.push(Component::Digest);
    toc.push(Component::Toc);
    let schema = o.out.join("schema.cql");
    write_file(&schema, SCHEMA.as_bytes())?;
    batch.last(
        &desc.path(&Component::Toc),
        Toc { components: toc }.serialize(),
    );
    batch.dir(&o.out);
    batch.commit().map_err(batch_err)?;
    Ok(GenReport {
        data: data_path,
        schema,
        partitions: keys.len() as u64,
        rows,
        data_length: data_len,
        data_file_bytes: file_bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

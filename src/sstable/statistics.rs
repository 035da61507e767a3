//! Statistics.db (`io/sstable/metadata/MetadataSerializer.java` and the four components).
//!
//! Container: int32 count, then (`na`+) a CRC32 of the count, `count` × (int32 type
//! ordinal, int32 absolute offset), (`na`+) a CRC32 of count‖TOC — the CRC object is not
//! reset after the first checksum — then each component's bytes, (`na`+) each followed by
//! its own CRC32. Components are ordered by ordinal: VALIDATION 0, COMPACTION 1, STATS 2,
//! HEADER 3 (`MetadataType`).
//!
//! VALIDATION, STATS and HEADER are parsed into fields; COMPACTION's HyperLogLog++ sketch
//! is kept as bytes. HEADER's EncodingStats are the base that row bytes in Data.db are
//! delta-encoded against, so a child must carry it unchanged (sstable-format.md §8.5).

use std::path::Path;

use super::bytes::{Put, Reader};
use super::descriptor::Version;
use super::error::{FormatError, Result};

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Validation {
    /// Partitioner class name, e.g. `org.apache.cassandra.dht.Murmur3Partitioner`.
    pub partitioner: String,
    /// The false-positive chance Filter.db was sized with.
    pub bloom_filter_fp_chance: f64,
}

/// COMPACTION, kept as its bytes: `ma`+ writers store an int32 length and
/// `HyperLogLogPlus.getBytes()` of every partition key's `hash2_64`; some third-party `mc`
/// writers still put the pre-3.0 ancestors list first. Only estimates read it, and a child
/// may carry its parent's sketch (HLL union is idempotent, sstable-format.md §8.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    pub raw: Vec<u8>,
}

impl Compaction {
    pub fn from_cardinality(sketch: &[u8]) -> Compaction {
        let mut raw = Vec::with_capacity(4 + sketch.len());
        raw.put_i32(sketch.len() as i32);
        raw.extend_from_slice(sketch);
        Compaction { raw }
    }

    /// The HyperLogLog++ bytes, if the component has either known layout.
    pub fn cardinality(&self) -> Option<&[u8]> {
        let int_at = |p: usize| -> Option<usize> {
            let b = self.raw.get(p..p + 4)?;
            usize::try_from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok()
        };
        let n = int_at(0)?;
        if 4 + n == self.raw.len() {
            return self.raw.get(4..);
        }
        // Ancestors layout: int32 count, count × int32, then the length-prefixed sketch.
        let skip = 4 + 4 * n;
        let m = int_at(skip)?;
        (skip + 4 + m == self.raw.len()).then(|| &self.raw[skip + 4..])
    }
}

/// `EstimatedHistogram` as serialized: `buckets` pairs of (offset, count), where the first
/// pair repeats offset[0] and the last bucket is the overflow.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EstimatedHistogram {
    pub pairs: Vec<(i64, i64)>,
}

impl EstimatedHistogram {
    /// `new EstimatedHistogram(bucketCount)`: offsets 1, 2, 3, … each `round(prev * 1.2)`,
    /// +1 when rounding repeats the previous one, and `bucketCount + 1` zero counts.
    pub fn empty(bucket_count: usize) -> EstimatedHistogram {
        let mut offsets = Vec::with_capacity(bucket_count);
        let mut last: i64 = 1;
        offsets.push(last);
        for _ in 1..bucket_count {
            let mut next = (last as f64 * 1.2).round() as i64;
            if next == last {
                next += 1;
            }
            offsets.push(next);
            last = next;
        }
        let mut pairs = Vec::with_capacity(bucket_count + 1);
        for i in 0..=bucket_count {
            pairs.push((offsets[if i == 0 { 0 } else { i - 1 }], 0));
        }
        EstimatedHistogram { pairs }
    }

    /// Bucket offsets (`getBucketOffsets`).
    pub fn offsets(&self) -> impl Iterator<Item = i64> + '_ {
        self.pairs.iter().skip(1).map(|p| p.0)
    }

    /// `EstimatedHistogram.add(v)`: the first bucket whose offset is >= v, else overflow.
    pub fn add(&mut self, v: i64) {
        let n = self.pairs.len();
        if n == 0 {
            return;
        }
        // Offsets are pairs[1..].0 (`offsets()`), ascending: searched in place, since this
        // runs once a partition per child histogram and a collected copy was a third of
        // the split's per-partition instructions (callgrind, docs/benchmarks.md).
        let idx = self.pairs[1..].partition_point(|p| p.0 < v);
        self.pairs[idx.min(n - 1)].1 += 1;
    }

    pub fn total(&self) -> i64 {
        self.pairs.iter().map(|p| p.1).sum()
    }

    fn parse(r: &mut Reader<'_>, what: &'static str) -> Result<EstimatedHistogram> {
        let at = r.offset();
        let n = r.count(what)?;
        if n == 0 || n > r.remaining() / 16 {
            return Err(r.corrupt_at(
                at,
                format!(
                    "{what}: bucket count {n} must be > 0 and fit in the {} bytes left",
                    r.remaining()
                ),
            ));
        }
        let mut pairs = Vec::with_capacity(n);
        for _ in 0..n {
            let o = r.i64(what)?;
            let c = r.i64(what)?;
            pairs.push((o, c));
        }
        Ok(EstimatedHistogram { pairs })
    }

    fn serialize(&self, out: &mut Vec<u8>) {
        out.put_i32(self.pairs.len() as i32);
        for (o, c) in &self.pairs {
            out.put_i64(*o);
            out.put_i64(*c);
        }
    }
}

/// `CommitLogPosition`: segment id + position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitLogPosition {
    pub segment_id: i64,
    pub position: i32,
}

impl CommitLogPosition {
    fn parse(r: &mut Reader<'_>) -> Result<Self> {
        Ok(CommitLogPosition {
            segment_id: r.i64("commit log segment id")?,
            position: r.i32("commit log position")?,
        })
    }
    fn serialize(&self, out: &mut Vec<u8>) {
        out.put_i64(self.segment_id);
        out.put_i32(self.position);
    }
}

/// The estimated tombstone drop-time histogram (`TombstoneHistogram`): `< oa` stores
/// (double point, int64 count), `oa` (int64 point, int32 count). Kept as read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TombstoneHistogram {
    pub max_bin_size: i32,
    pub bins: Vec<(f64, i64)>,
}

/// One clustering value in a bound: the serialization header distinguishes null and
/// empty from a value (`ClusteringPrefix.Serializer.makeHeader`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusteringValue {
    Null,
    Empty,
    Value(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusteringBound {
    /// `ClusteringPrefix.Kind` ordinal.
    pub kind: u8,
    pub values: Vec<ClusteringValue>,
}

/// `oa` typed min/max clustering: the clustering types then a `Slice` (two bounds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoveredClustering {
    pub types: Vec<String>,
    pub start: ClusteringBound,
    pub end: ClusteringBound,
}

/// STATS (`StatsMetadata`), every field in file order; presence follows the version.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub partition_sizes: EstimatedHistogram,
    pub cells_per_partition: EstimatedHistogram,
    pub commit_log_upper_bound: CommitLogPosition,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    /// Signed int32 before `oa`, unsigned int32 from `oa`: kept as i64 either way.
    pub min_local_deletion_time: i64,
    pub max_local_deletion_time: i64,
    pub min_ttl: i32,
    pub max_ttl: i32,
    pub compression_ratio: f64,
    pub tombstone_drop_times: TombstoneHistogram,
    pub sstable_level: i32,
    /// Milliseconds since the epoch; 0 = unrepaired (`ActiveRepairService.UNREPAIRED_SSTABLE`).
    pub repaired_at: i64,
    /// `m*`/`n*`: legacy min and max clustering values.
    pub legacy_min_clustering: Option<Vec<Vec<u8>>>,
    pub legacy_max_clustering: Option<Vec<Vec<u8>>>,
    /// `nc`+: typed min/max clustering.
    pub covered_clustering: Option<CoveredClustering>,
    pub has_legacy_counter_shards: bool,
    pub total_columns_set: i64,
    pub total_rows: i64,
    pub commit_log_lower_bound: Option<CommitLogPosition>,
    pub commit_log_intervals: Option<Vec<(CommitLogPosition, CommitLogPosition)>>,
    /// `na`+: `Some(None)` = field present, no session.
    pub pending_repair: Option<Option<[u8; 16]>>,
    pub is_transient: Option<bool>,
    pub originating_host_id: Option<Option<[u8; 16]>>,
    pub has_partition_level_deletions: Option<bool>,
    pub first_key: Option<Vec<u8>>,
    pub last_key: Option<Vec<u8>>,
    pub token_space_coverage: Option<f64>,
}

/// The fixed serialized length of a clustering type's values, or `None` for variable
/// length (`AbstractType.valueLengthIfFixed` overrides).
pub(crate) fn fixed_value_length(type_name: &str) -> Option<usize> {
    let t = type_name.trim();
    if let Some(inner) = t
        .strip_prefix("org.apache.cassandra.db.marshal.ReversedType(")
        .and_then(|s| s.strip_suffix(')'))
    {
        return fixed_value_length(inner);
    }
    let simple = t.rsplit('.').next().unwrap_or(t);
    match simple {
        "EmptyType" => Some(0),
        "BooleanType" => Some(1),
        "Int32Type" | "FloatType" | "SimpleDateType" => Some(4),
        "LongType" | "DoubleType" | "TimestampType" | "DateType" | "CounterColumnType"
        | "TimeType" => Some(8),
        "UUIDType" | "TimeUUIDType" | "LexicalUUIDType" => Some(16),
        _ => None,
    }
}

impl ClusteringBound {
    fn parse(r: &mut Reader<'_>, types: &[String]) -> Result<Self> {
        let kind = r.u8("clustering bound kind")?;
        if kind > 7 {
            return Err(r.corrupt(format!("clustering bound kind {kind}: expected 0..=7")));
        }
        let at = r.offset();
        let size = r.u16("clustering bound size")? as usize;
        if size > types.len() {
            return Err(r.corrupt_at(
                at,
                format!(
                    "clustering bound has {size} values but the table has {} clustering columns",
                    types.len()
                ),
            ));
        }
        let mut values = Vec::with_capacity(size);
        let mut header = 0u64;
        for (i, ty) in types.iter().enumerate().take(size) {
            // Headers come in batches of 32 values, 2 bits each: bit 2i = empty, 2i+1 = null.
            if i % 32 == 0 {
                header = r.uvint("clustering values header")?;
            }
            let shift = (i % 32) * 2;
            let v = if header & (1 << (shift + 1)) != 0 {
                ClusteringValue::Null
            } else if header & (1 << shift) != 0 {
                ClusteringValue::Empty
            } else {
                match fixed_value_length(ty) {
                    Some(n) => ClusteringValue::Value(r.bytes(n, "clustering value")?.to_vec()),
                    None => ClusteringValue::Value(r.vint_bytes("clustering value")?.to_vec()),
                }
            };
            values.push(v);
        }
        Ok(ClusteringBound { kind, values })
    }

    fn serialize(&self, out: &mut Vec<u8>, types: &[String]) {
        out.put_u8(self.kind);
        out.put_u16(self.values.len() as u16);
        for (batch_no, batch) in self.values.chunks(32).enumerate() {
            let mut header = 0u64;
            for (i, v) in batch.iter().enumerate() {
                match v {
                    ClusteringValue::Null => header |= 1 << (i * 2 + 1),
                    ClusteringValue::Empty => header |= 1 << (i * 2),
                    ClusteringValue::Value(_) => {}
                }
            }
            out.put_uvint(header);
            for (i, v) in batch.iter().enumerate() {
                if let ClusteringValue::Value(b) = v {
                    let ty = types
                        .get(batch_no * 32 + i)
                        .map(String::as_str)
                        .unwrap_or("");
                    if fixed_value_length(ty).is_some() {
                        out.extend_from_slice(b);
                    } else {
                        out.put_vint_bytes(b);
                    }
                }
            }
        }
    }
}

fn parse_uuid_opt(r: &mut Reader<'_>, field: &'static str) -> Result<Option<[u8; 16]>> {
    if r.bool(field)? {
        let mut u = [0u8; 16];
        u.copy_from_slice(r.bytes(16, field)?);
        Ok(Some(u))
    } else {
        Ok(None)
    }
}

fn put_uuid_opt(out: &mut Vec<u8>, u: &Option<[u8; 16]>) {
    match u {
        Some(b) => {
            out.put_bool(true);
            out.extend_from_slice(b);
        }
        None => out.put_bool(false),
    }
}

fn parse_value_list(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<Vec<u8>>> {
    let at = r.offset();
    let n = r.count(what)?;
    if n > r.remaining() / 2 {
        return Err(r.corrupt_at(
            at,
            format!(
                "{what}: count {n} cannot fit in the {} bytes left",
                r.remaining()
            ),
        ));
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.u16(what)? as usize;
        v.push(r.bytes(len, what)?.to_vec());
    }
    Ok(v)
}

fn put_value_list(out: &mut Vec<u8>, v: &[Vec<u8>]) {
    out.put_i32(v.len() as i32);
    for b in v {
        out.put_u16(b.len() as u16);
        out.extend_from_slice(b);
    }
}

fn parse_covered(r: &mut Reader<'_>) -> Result<CoveredClustering> {
    let at = r.offset();
    let n = r.uvint("clustering type count")?;
    if n > r.remaining() as u64 {
        return Err(r.corrupt_at(
            at,
            format!(
                "clustering type count {n} cannot fit in the {} bytes left",
                r.remaining()
            ),
        ));
    }
    let mut types = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let at = r.offset();
        let b = r.vint_bytes("clustering type")?;
        types.push(
            String::from_utf8(b.to_vec())
                .map_err(|_| r.corrupt_at(at, "clustering type: expected a UTF-8 type name"))?,
        );
    }
    let start = ClusteringBound::parse(r, &types)?;
    let end = ClusteringBound::parse(r, &types)?;
    Ok(CoveredClustering { types, start, end })
}

fn put_covered(out: &mut Vec<u8>, cc: Option<&CoveredClustering>) {
    let empty = CoveredClustering {
        types: Vec::new(),
        start: ClusteringBound {
            kind: 1,
            values: Vec::new(),
        },
        end: ClusteringBound {
            kind: 6,
            values: Vec::new(),
        },
    };
    let cc = cc.unwrap_or(&empty);
    out.put_uvint(cc.types.len() as u64);
    for t in &cc.types {
        out.put_vint_bytes(t.as_bytes());
    }
    cc.start.serialize(out, &cc.types);
    cc.end.serialize(out, &cc.types);
}

impl Stats {
    pub fn parse(r: &mut Reader<'_>, v: Version) -> Result<Stats> {
        let partition_sizes = EstimatedHistogram::parse(r, "estimated partition size histogram")?;
        let cells_per_partition =
            EstimatedHistogram::parse(r, "estimated cells per partition histogram")?;
        let commit_log_upper_bound = CommitLogPosition::parse(r)?;
        let min_timestamp = r.i64("min timestamp")?;
        let max_timestamp = r.i64("max timestamp")?;
        let (min_local_deletion_time, max_local_deletion_time) = if v.has_uint_deletion_time() {
            (
                r.u32("min local deletion time")? as i64,
                r.u32("max local deletion time")? as i64,
            )
        } else {
            (
                r.i32("min local deletion time")? as i64,
                r.i32("max local deletion time")? as i64,
            )
        };
        let min_ttl = r.i32("min TTL")?;
        let max_ttl = r.i32("max TTL")?;
        let compression_ratio = r.f64("compression ratio")?;
        let max_bin_size = r.i32("tombstone histogram max bin size")?;
        let at = r.offset();
        let bins_n = r.count("tombstone histogram size")?;
        let bin_bytes = if v.has_uint_deletion_time() { 12 } else { 16 };
        if bins_n > r.remaining() / bin_bytes {
            return Err(r.corrupt_at(
                at,
                format!(
                    "tombstone histogram size {bins_n} cannot fit in the {} bytes left",
                    r.remaining()
                ),
            ));
        }
        let mut bins = Vec::with_capacity(bins_n);
        for _ in 0..bins_n {
            if v.has_uint_deletion_time() {
                let p = r.i64("tombstone histogram point")?;
                let c = r.i32("tombstone histogram count")?;
                bins.push((p as f64, c as i64));
            } else {
                let p = r.f64("tombstone histogram point")?;
                let c = r.i64("tombstone histogram count")?;
                bins.push((p, c));
            }
        }
        let sstable_level = r.i32("sstable level")?;
        let repaired_at = r.i64("repairedAt")?;
        let (legacy_min_clustering, legacy_max_clustering) = if v.has_legacy_min_max() {
            (
                Some(parse_value_list(r, "min clustering values")?),
                Some(parse_value_list(r, "max clustering values")?),
            )
        } else {
            (None, None)
        };
        // `oa` writes the typed min/max right after repairedAt; `nc` (a 5.0 pre-release
        // format, only in Cassandra's own test fixtures) wrote it after the
        // partition-level-deletions marker.
        let mut covered_clustering = if v.has_improved_min_max() && v.has_uint_deletion_time() {
            Some(parse_covered(r)?)
        } else {
            None
        };
        let has_legacy_counter_shards = r.bool("hasLegacyCounterShards")?;
        let total_columns_set = r.i64("total columns set")?;
        let total_rows = r.i64("total rows")?;
        let commit_log_lower_bound = if v.has_commit_log_lower_bound() {
            Some(CommitLogPosition::parse(r)?)
        } else {
            None
        };
        let commit_log_intervals = if v.has_commit_log_intervals() {
            let at = r.offset();
            let n = r.count("commit log interval count")?;
            if n > r.remaining() / 24 {
                return Err(r.corrupt_at(
                    at,
                    format!(
                        "commit log interval count {n} cannot fit in the {} bytes left",
                        r.remaining()
                    ),
                ));
            }
            let mut iv = Vec::with_capacity(n);
            for _ in 0..n {
                iv.push((CommitLogPosition::parse(r)?, CommitLogPosition::parse(r)?));
            }
            Some(iv)
        } else {
            None
        };
        let pending_repair = if v.has_pending_repair() {
            Some(parse_uuid_opt(r, "pendingRepair")?)
        } else {
            None
        };
        // `na` files written by 4.0 pre-releases (the corpus's `*_compact` fixtures) end
        // after pendingRepair: isTransient came later under the same version string.
        let is_transient = if v.has_pending_repair() && !(v.as_str() == "na" && r.is_empty()) {
            Some(r.bool("isTransient")?)
        } else {
            None
        };
        let originating_host_id = if v.has_originating_host_id() {
            Some(parse_uuid_opt(r, "originatingHostId")?)
        } else {
            None
        };
        let has_partition_level_deletions = if v.has_partition_level_deletions_marker() {
            Some(r.bool("hasPartitionLevelDeletions")?)
        } else {
            None
        };
        if v.has_improved_min_max() && !v.has_uint_deletion_time() {
            covered_clustering = Some(parse_covered(r)?);
        }
        let (first_key, last_key) = if v.has_key_range() {
            (
                Some(r.vint_bytes("first key")?.to_vec()),
                Some(r.vint_bytes("last key")?.to_vec()),
            )
        } else {
            (None, None)
        };
        let token_space_coverage = if v.has_token_space_coverage() {
            Some(r.f64("tokenSpaceCoverage")?)
        } else {
            None
        };
        Ok(Stats {
            partition_sizes,
            cells_per_partition,
            commit_log_upper_bound,
            min_timestamp,
            max_timestamp,
            min_local_deletion_time,
            max_local_deletion_time,
            min_ttl,
            max_ttl,
            compression_ratio,
            tombstone_drop_times: TombstoneHistogram { max_bin_size, bins },
            sstable_level,
            repaired_at,
            legacy_min_clustering,
            legacy_max_clustering,
            covered_clustering,
            has_legacy_counter_shards,
            total_columns_set,
            total_rows,
            commit_log_lower_bound,
            commit_log_intervals,
            pending_repair,
            is_transient,
            originating_host_id,
            has_partition_level_deletions,
            first_key,
            last_key,
            token_space_coverage,
        })
    }

    /// Serializes the fields the version has; a field the version lacks is not written
    /// even if set, and a missing one the version needs is written as its default.
    pub fn serialize(&self, v: Version, out: &mut Vec<u8>) {
        self.partition_sizes.serialize(out);
        self.cells_per_partition.serialize(out);
        self.commit_log_upper_bound.serialize(out);
        out.put_i64(self.min_timestamp);
        out.put_i64(self.max_timestamp);
        out.put_i32(self.min_local_deletion_time as i32);
        out.put_i32(self.max_local_deletion_time as i32);
        out.put_i32(self.min_ttl);
        out.put_i32(self.max_ttl);
        out.put_f64(self.compression_ratio);
        out.put_i32(self.tombstone_drop_times.max_bin_size);
        out.put_i32(self.tombstone_drop_times.bins.len() as i32);
        for (p, c) in &self.tombstone_drop_times.bins {
            if v.has_uint_deletion_time() {
                out.put_i64(*p as i64);
                out.put_i32(*c as i32);
            } else {
                out.put_f64(*p);
                out.put_i64(*c);
            }
        }
        out.put_i32(self.sstable_level);
        out.put_i64(self.repaired_at);
        if v.has_legacy_min_max() {
            put_value_list(out, self.legacy_min_clustering.as_deref().unwrap_or(&[]));
            put_value_list(out, self.legacy_max_clustering.as_deref().unwrap_or(&[]));
        }
        if v.has_improved_min_max() && v.has_uint_deletion_time() {
            put_covered(out, self.covered_clustering.as_ref());
        }
        out.put_bool(self.has_legacy_counter_shards);
        out.put_i64(self.total_columns_set);
        out.put_i64(self.total_rows);
        if v.has_commit_log_lower_bound() {
            self.commit_log_lower_bound
                .unwrap_or_default()
                .serialize(out);
        }
        if v.has_commit_log_intervals() {
            let iv = self.commit_log_intervals.as_deref().unwrap_or(&[]);
            out.put_i32(iv.len() as i32);
            for (a, b) in iv {
                a.serialize(out);
                b.serialize(out);
            }
        }
        if v.has_pending_repair() {
            put_uuid_opt(out, &self.pending_repair.flatten());
            if let Some(t) = self.is_transient {
                out.put_bool(t);
            }
        }
        if v.has_originating_host_id() {
            put_uuid_opt(out, &self.originating_host_id.flatten());
        }
        if v.has_partition_level_deletions_marker() {
            // Unknown means "maybe": true is the conservative answer.
            out.put_bool(self.has_partition_level_deletions.unwrap_or(true));
        }
        if v.has_improved_min_max() && !v.has_uint_deletion_time() {
            put_covered(out, self.covered_clustering.as_ref());
        }
        if v.has_key_range() {
            out.put_vint_bytes(self.first_key.as_deref().unwrap_or(&[]));
            out.put_vint_bytes(self.last_key.as_deref().unwrap_or(&[]));
        }
        if v.has_token_space_coverage() {
            out.put_f64(self.token_space_coverage.unwrap_or(f64::NAN));
        }
    }
}

/// A column of the serialization header: name bytes and type name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeaderColumn {
    #[serde(serialize_with = "crate::sstable::hex::serialize")]
    pub name: Vec<u8>,
    pub type_name: String,
}

/// HEADER (`SerializationHeader.Component`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SerializationHeader {
    /// EncodingStats, each a delta from Cassandra's fixed epochs, as stored.
    pub min_timestamp_delta: u64,
    pub min_local_deletion_time_delta: u64,
    pub min_ttl_delta: u64,
    pub key_type: String,
    pub clustering_types: Vec<String>,
    pub static_columns: Vec<HeaderColumn>,
    pub regular_columns: Vec<HeaderColumn>,
}

fn parse_type(r: &mut Reader<'_>, what: &'static str) -> Result<String> {
    let at = r.offset();
    let b = r.vint_bytes(what)?;
    String::from_utf8(b.to_vec())
        .map_err(|_| r.corrupt_at(at, format!("{what}: expected a UTF-8 type name")))
}

fn parse_columns(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<HeaderColumn>> {
    let at = r.offset();
    let n = r.uvint(what)?;
    if n > r.remaining() as u64 {
        return Err(r.corrupt_at(
            at,
            format!(
                "{what}: count {n} cannot fit in the {} bytes left",
                r.remaining()
            ),
        ));
    }
    let mut cols = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let name = r.vint_bytes("column name")?.to_vec();
        let type_name = parse_type(r, "column type")?;
        cols.push(HeaderColumn { name, type_name });
    }
    Ok(cols)
}

impl SerializationHeader {
    fn parse(r: &mut Reader<'_>) -> Result<Self> {
        let min_timestamp_delta = r.uvint("EncodingStats min timestamp")?;
        let min_local_deletion_time_delta = r.uvint("EncodingStats min local deletion time")?;
        let min_ttl_delta = r.uvint("EncodingStats min TTL")?;
        let key_type = parse_type(r, "partition key type")?;
        let at = r.offset();
        let n = r.uvint("clustering type count")?;
        if n > r.remaining() as u64 {
            return Err(r.corrupt_at(
                at,
                format!(
                    "clustering type count {n} cannot fit in the {} bytes left",
                    r.remaining()
                ),
            ));
        }
        let mut clustering_types = Vec::with_capacity(n as usize);
        for _ in 0..n {
            clustering_types.push(parse_type(r, "clustering type")?);
        }
        let static_columns = parse_columns(r, "static column count")?;
        let regular_columns = parse_columns(r, "regular column count")?;
        Ok(SerializationHeader {
            min_timestamp_delta,
            min_local_deletion_time_delta,
            min_ttl_delta,
            key_type,
            clustering_types,
            static_columns,
            regular_columns,
        })
    }

    fn serialize(&self, out: &mut Vec<u8>) {
        out.put_uvint(self.min_timestamp_delta);
        out.put_uvint(self.min_local_deletion_time_delta);
        out.put_uvint(self.min_ttl_delta);
        out.put_vint_bytes(self.key_type.as_bytes());
        out.put_uvint(self.clustering_types.len() as u64);
        for t in &self.clustering_types {
            out.put_vint_bytes(t.as_bytes());
        }
        for cols in [&self.static_columns, &self.regular_columns] {
            out.put_uvint(cols.len() as u64);
            for c in cols {
                out.put_vint_bytes(&c.name);
                out.put_vint_bytes(c.type_name.as_bytes());
            }
        }
    }
}

/// The whole Statistics.db.
#[derive(Debug, Clone, PartialEq)]
pub struct Statistics {
    pub validation: Option<Validation>,
    pub compaction: Option<Compaction>,
    pub stats: Option<Stats>,
    pub header: Option<SerializationHeader>,
    /// Component types in the order of the file's table; empty = ordinal order, which is
    /// what Cassandra writes. Some 3.x-era files list them in another order, which readers
    /// accept (they look components up by type), so it is kept for a byte-exact rewrite.
    pub toc_order: Vec<i32>,
    /// Zero bytes after the STATS body, inside its slot. `MetadataSerializer.serialize`
    /// writes each component as `DataOutputBuffer(serializedSize).getData()`, the whole
    /// buffer, and for `oa` 5.0's `TombstoneHistogram.HistogramSerializer.serializedSize`
    /// counts 16 bytes a bin where `serialize` writes 12: the slot ends in 4 zero bytes a
    /// bin (every 5.0.9 sstable with a TTL or a tombstone, from its CQLSSTableWriter and its
    /// compaction alike). Readers look a component up by its offset and never reach them;
    /// kept for a byte-exact rewrite.
    pub stats_padding: usize,
}

const VALIDATION: i32 = 0;
const COMPACTION: i32 = 1;
const STATS: i32 = 2;
const HEADER: i32 = 3;

fn check_crc(file: &Path, at: u64, what: &str, stored: u32, bytes: &[u8]) -> Result<()> {
    let computed = crc32fast::hash(bytes);
    if stored != computed {
        return Err(FormatError::Checksum {
            loc: super::error::Location {
                file: file.to_path_buf(),
                offset: Some(at),
            },
            what: what.to_string(),
            stored,
            computed,
        });
    }
    Ok(())
}

impl Statistics {
    pub fn parse(file: &Path, bytes: &[u8], v: Version) -> Result<Statistics> {
        let mut r = Reader::new(file, bytes);
        let at = r.offset();
        let count = r.count("metadata component count")?;
        if count > 4 {
            return Err(r.corrupt_at(
                at,
                format!("metadata component count: expected at most 4, found {count}"),
            ));
        }
        let checksummed = v.has_metadata_checksum();
        if checksummed {
            let at = r.offset();
            let stored = r.u32("component count CRC32")?;
            check_crc(
                file,
                at,
                "the metadata component count",
                stored,
                &bytes[0..4],
            )?;
        }
        let toc_start = r.pos();
        let mut toc: Vec<(i32, usize)> = Vec::with_capacity(count);
        for _ in 0..count {
            let at = r.offset();
            let t = r.i32("metadata component type")?;
            let off = r.i32("metadata component offset")?;
            if !(0..=3).contains(&t) || toc.iter().any(|(pt, _)| *pt == t) {
                return Err(r.corrupt_at(
                    at,
                    format!("metadata component type {t}: expected a distinct type 0..=3"),
                ));
            }
            if off < 0 {
                return Err(r.corrupt_at(
                    at + 4,
                    format!("metadata component {t} offset {off}: expected >= 0"),
                ));
            }
            toc.push((t, off as usize));
        }
        if checksummed {
            let at = r.offset();
            let stored = r.u32("metadata TOC CRC32")?;
            // The CRC object is not reset after the count's checksum (MetadataSerializer).
            let mut h = crc32fast::Hasher::new();
            h.update(&bytes[0..4]);
            h.update(&bytes[toc_start..toc_start + count * 8]);
            let computed = h.finalize();
            if stored != computed {
                return Err(FormatError::Checksum {
                    loc: super::error::Location {
                        file: file.to_path_buf(),
                        offset: Some(at),
                    },
                    what: "the metadata component table".into(),
                    stored,
                    computed,
                });
            }
        }
        // Bodies lie back to back in offset order; each ends where the next begins.
        let mut by_offset = toc.clone();
        by_offset.sort_by_key(|e| e.1);
        let mut expected_offset = r.pos();
        let mut out = Statistics {
            validation: None,
            compaction: None,
            stats: None,
            header: None,
            toc_order: toc.iter().map(|e| e.0).collect(),
            stats_padding: 0,
        };
        for (i, (t, off)) in by_offset.iter().enumerate() {
            if *off != expected_offset {
                return Err(FormatError::corrupt(
                    file,
                    Some(*off as u64),
                    format!("metadata component {t} starts at {off}, expected {expected_offset} (components are back to back)"),
                ));
            }
            let end = by_offset.get(i + 1).map_or(bytes.len(), |n| n.1);
            if end > bytes.len() {
                return Err(FormatError::corrupt(
                    file,
                    Some(*off as u64),
                    format!(
                        "metadata component {t} ends at {end}, where the next one starts: past the end of the file ({} bytes)",
                        bytes.len()
                    ),
                ));
            }
            let body_end = if checksummed {
                end.checked_sub(4)
            } else {
                Some(end)
            };
            let body_end = body_end
                .filter(|e| *e >= *off && *e <= bytes.len())
                .ok_or_else(|| {
                    FormatError::corrupt(
                        file,
                        Some(*off as u64),
                        format!("metadata component {t} has no room for its bytes"),
                    )
                })?;
            let body = &bytes[*off..body_end];
            if checksummed {
                let stored = u32::from_be_bytes([
                    bytes[body_end],
                    bytes[body_end + 1],
                    bytes[body_end + 2],
                    bytes[body_end + 3],
                ]);
                check_crc(
                    file,
                    body_end as u64,
                    &format!("metadata component {t}"),
                    stored,
                    body,
                )?;
            }
            let mut cr = Reader::with_base(file, body, *off as u64);
            match *t {
                VALIDATION => {
                    let partitioner = cr.utf("partitioner class name")?;
                    let bloom_filter_fp_chance = cr.f64("bloom filter fp chance")?;
                    cr.expect_end("VALIDATION metadata")?;
                    out.validation = Some(Validation {
                        partitioner,
                        bloom_filter_fp_chance,
                    });
                }
                COMPACTION => {
                    out.compaction = Some(Compaction {
                        raw: cr.rest().to_vec(),
                    });
                }
                STATS => {
                    let s = Stats::parse(&mut cr, v)?;
                    // 5.0's `TombstoneHistogram.HistogramSerializer` writes 12 bytes a bin
                    // (long point, int count) for `oa`, but its `serializedSize` still counts
                    // 16; `MetadataSerializer` places the next component by serializedSize,
                    // so the STATS body ends with 4 zero bytes a bin. Seen on every 5.0.9
                    // flush with a TTL or a tombstone (tests/oracle_live.rs).
                    let pad = if v.has_uint_deletion_time() {
                        4 * s.tombstone_drop_times.bins.len()
                    } else {
                        0
                    };
                    if pad > 0 && cr.remaining() == pad {
                        let at = cr.offset();
                        if cr
                            .bytes(pad, "tombstone histogram size padding")?
                            .iter()
                            .any(|b| *b != 0)
                        {
                            return Err(cr.corrupt_at(
                                at,
                                format!("the {pad} bytes after STATS metadata (Cassandra's serializedSize padding of 4 a tombstone histogram bin) are not zero"),
                            ));
                        }
                        out.stats_padding = pad;
                    }
                    cr.expect_end("STATS metadata")?;
                    out.stats = Some(s);
                }
                _ => {
                    let h = SerializationHeader::parse(&mut cr)?;
                    cr.expect_end("HEADER metadata")?;
                    out.header = Some(h);
                }
            }
            expected_offset = end;
        }
        if toc.windows(2).all(|w| w[0].0 < w[1].0) {
            out.toc_order.clear();
        }
        Ok(out)
    }

    pub fn serialize(&self, v: Version) -> Vec<u8> {
        let mut components: Vec<(i32, Vec<u8>)> = Vec::with_capacity(4);
        if let Some(val) = &self.validation {
            let mut b = Vec::new();
            b.put_utf(&val.partitioner);
            b.put_f64(val.bloom_filter_fp_chance);
            components.push((VALIDATION, b));
        }
        if let Some(c) = &self.compaction {
            components.push((COMPACTION, c.raw.clone()));
        }
        if let Some(s) = &self.stats {
            let mut b = Vec::new();
            s.serialize(v, &mut b);
            b.resize(b.len() + self.stats_padding, 0);
            components.push((STATS, b));
        }
        if let Some(h) = &self.header {
            let mut b = Vec::new();
            h.serialize(&mut b);
            components.push((HEADER, b));
        }
        // Bodies in ordinal order (as every writer lays them out); the table in the file's
        // order when it named exactly these components.
        let mut table: Vec<i32> = components.iter().map(|c| c.0).collect();
        let mut kept = self.toc_order.clone();
        kept.sort();
        if kept == table {
            table = self.toc_order.clone();
        }
        let checksummed = v.has_metadata_checksum();
        let crc_len = if checksummed { 4 } else { 0 };
        let mut out = Vec::new();
        out.put_i32(components.len() as i32);
        if checksummed {
            out.put_u32(crc32fast::hash(&out[0..4]));
        }
        let toc_start = out.len();
        let mut offsets = Vec::with_capacity(components.len());
        let mut offset = toc_start + components.len() * 8 + crc_len;
        for (_, b) in &components {
            offsets.push(offset);
            offset += b.len() + crc_len;
        }
        for t in &table {
            let i = components.iter().position(|c| c.0 == *t).unwrap_or(0);
            out.put_i32(*t);
            out.put_i32(offsets[i] as i32);
        }
        if checksummed {
            let mut h = crc32fast::Hasher::new();
            h.update(&out[0..4]);
            h.update(&out[toc_start..]);
            out.put_u32(h.finalize());
        }
        for (_, b) in &components {
            out.extend_from_slice(b);
            if checksummed {
                out.put_u32(crc32fast::hash(b));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checksummed (`na`+) container whose table is `entries` (type, offset), with
    /// valid count and table CRCs, followed by `body`.
    fn container(entries: &[(i32, i32)], body: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_i32(entries.len() as i32);
        b.put_u32(crc32fast::hash(&b[0..4]));
        for (t, off) in entries {
            b.put_i32(*t);
            b.put_i32(*off);
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&b[0..4]);
        h.update(&b[8..]);
        b.put_u32(h.finalize());
        b.extend_from_slice(body);
        b
    }

    /// Statistics.db of an sstable Cassandra 5.0.9's CQLSSTableWriter wrote (BIG `oa`):
    /// its STATS slot ends in 4 zero bytes (`MetadataSerializer` writes the whole
    /// `DataOutputBuffer` sized by `serializedSize`).
    const CASSANDRA_509_OA: &[u8] =
        include_bytes!("../../tests/fixtures/cassandra-5.0.9/oa-2-big-Statistics.db");

    #[test]
    fn cassandra_5_0_9_stats_padding_round_trips_byte_for_byte() {
        let v = Version::parse("oa").unwrap();
        let s = Statistics::parse(Path::new("s"), CASSANDRA_509_OA, v).unwrap();
        assert_eq!(s.stats_padding, 4);
        assert_eq!(s.serialize(v), CASSANDRA_509_OA);
        let mut none = s.clone();
        none.stats_padding = 0;
        let b = none.serialize(v);
        assert_eq!(b.len(), CASSANDRA_509_OA.len() - 4);
        // (Compared as bytes: tokenSpaceCoverage is NaN, which equals nothing.)
        let again = Statistics::parse(Path::new("s"), &b, v).unwrap();
        assert_eq!(again.stats_padding, 0);
        assert_eq!(again.serialize(v), b);
    }

    #[test]
    fn stats_trailing_bytes_that_are_not_zero_are_corrupt() {
        let v = Version::parse("oa").unwrap();
        let mut b = CASSANDRA_509_OA.to_vec();
        // The slot table: count, CRC, (type, offset) * count, CRC.
        let off =
            |i: usize| i32::from_be_bytes(b[12 + 8 * i..16 + 8 * i].try_into().unwrap()) as usize;
        let (stats_start, stats_crc) = (off(STATS as usize), off(HEADER as usize) - 4);
        b[stats_crc - 1] = 1;
        let crc = crc32fast::hash(&b[stats_start..stats_crc]);
        b[stats_crc..stats_crc + 4].copy_from_slice(&crc.to_be_bytes());
        let e = Statistics::parse(Path::new("s"), &b, v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the 4 bytes after STATS metadata"), "{e}");
        assert!(e.contains("are not zero"), "{e}");
    }

    #[test]
    fn component_offset_past_the_end_is_corrupt() {
        // Found by fuzz/fuzz_targets/statistics.rs: a component whose successor's offset
        // lies past the end of the file read its CRC from beyond the end.
        let v = Version::parse("nb").unwrap();
        let bytes = container(&[(VALIDATION, 28), (COMPACTION, 34)], &[0; 4]);
        assert_eq!(bytes.len(), 32);
        let e = Statistics::parse(Path::new("s"), &bytes, v).unwrap_err();
        assert_eq!(e.kind(), "corrupt");
        let e = e.to_string();
        assert!(
            e.contains("offset 28") && e.contains("metadata component 0 ends at 34"),
            "{e}"
        );
        // The same past the end of a file that is not checksummed.
        let v = Version::parse("mc").unwrap();
        let mut bytes = Vec::new();
        bytes.put_i32(2);
        for (t, off) in [(VALIDATION, 20), (COMPACTION, 40)] {
            bytes.put_i32(t);
            bytes.put_i32(off);
        }
        bytes.extend_from_slice(&[0; 4]);
        let e = Statistics::parse(Path::new("s"), &bytes, v).unwrap_err();
        assert_eq!(e.kind(), "corrupt", "{e}");
    }

    #[test]
    fn histogram_offsets_match_cassandra() {
        let h = EstimatedHistogram::empty(155);
        assert_eq!(h.pairs.len(), 156);
        let offs: Vec<i64> = h.offsets().take(12).collect();
        assert_eq!(offs, vec![1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 17]);
        let mut h = h;
        h.add(9);
        h.add(10);
        h.add(i64::MAX);
        assert_eq!(
            h.pairs[8].1, 2,
            "9 and 10 both land in bucket 8, whose upper offset is 10"
        );
        assert_eq!(h.pairs[155].1, 1, "overflow");
    }

    #[test]
    fn histogram_add_lands_where_a_search_of_the_offsets_says() {
        // The reference is `add` as it was: a search of the collected `offsets()`.
        let mut h = EstimatedHistogram::empty(155);
        let mut want = vec![0i64; 156];
        let offsets: Vec<i64> = h.offsets().collect();
        let mut v: i64 = -3;
        while v < 1 << 40 {
            h.add(v);
            want[offsets.partition_point(|o| *o < v).min(155)] += 1;
            v = if v < 64 { v + 1 } else { v + v / 7 };
        }
        h.add(i64::MAX);
        want[155] += 1;
        assert_eq!(h.pairs.iter().map(|p| p.1).collect::<Vec<_>>(), want);
    }
}

//! Reading one partition's rows (BIG `ma`+ Data.db, Cassandra 3.0's "unfiltered" encoding)
//! just far enough to return one regular column's newest live simple cell by name.
//!
//! Pure format: bytes in, a value out. Every other cell, row, static row and range tombstone
//! marker is decoded and skipped field by field (not by its size), and each row's parse is
//! checked against its stored `rowSize`, so a misread shows up as an error at the row, not as
//! a wrong value later. The layout, from `UnfilteredSerializer`, `SerializationHeader`,
//! `Columns.Serializer` and `Cell.Serializer` (4.1 and 5.0 write the same bytes here):
//!
//! ```text
//! u16 key length | key | partition DeletionTime
//! unfiltered*:
//!   flags u8 [ext u8 if 0x80]
//!   row:    [clustering values, not for the static row] rowSize prevSize
//!           [ts if 0x04] [ttl ldt if 0x08] [ts ldt if 0x10] [subset unless 0x20]
//!           per present column: simple cell | [ts ldt if 0x40] count cell*   (complex)
//!   marker (0x02): bound kind u8 | u16 size | values | markerSize prevSize DeletionTime{1,2}
//! 0x01 END_OF_PARTITION
//! ```

use super::bytes::Reader;
use super::error::{FormatError, Result};
use super::statistics::{fixed_value_length, HeaderColumn, SerializationHeader};
use super::Version;

// UnfilteredSerializer flags.
const END_OF_PARTITION: u8 = 0x01;
const IS_MARKER: u8 = 0x02;
const HAS_TIMESTAMP: u8 = 0x04;
const HAS_TTL: u8 = 0x08;
const HAS_DELETION: u8 = 0x10;
const HAS_ALL_COLUMNS: u8 = 0x20;
const HAS_COMPLEX_DELETION: u8 = 0x40;
const EXTENSION_FLAG: u8 = 0x80;
// Extended flags.
const IS_STATIC: u8 = 0x01;

// Cell.Serializer flags.
const CELL_IS_DELETED: u8 = 0x01;
const CELL_IS_EXPIRING: u8 = 0x02;
const CELL_HAS_EMPTY_VALUE: u8 = 0x04;
const CELL_USE_ROW_TIMESTAMP: u8 = 0x08;
const CELL_USE_ROW_TTL: u8 = 0x10;

/// `EncodingStats.TIMESTAMP_EPOCH` (2015-09-22 00:00 UTC in microseconds) and
/// `DELETION_TIME_EPOCH` (seconds): the header's minimums are stored as deltas from them.
const TIMESTAMP_EPOCH: i64 = 1_442_880_000_000_000;
const DELETION_TIME_EPOCH: i64 = 1_442_880_000;

/// A live cell's value and write timestamp (microseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellValue {
    pub value: Vec<u8>,
    pub timestamp: i64,
    /// Uncompressed Data.db offset of the cell's flags byte.
    pub offset: u64,
}

/// The header's minimums, which every row and cell timestamp, TTL and deletion time is a
/// vint delta from (`SerializationHeader.readTimestamp` etc.).
struct Mins {
    timestamp: i64,
    local_deletion_time: i64,
    ttl: i64,
}

impl Mins {
    fn of(h: &SerializationHeader) -> Mins {
        Mins {
            timestamp: (h.min_timestamp_delta as i64).wrapping_add(TIMESTAMP_EPOCH),
            local_deletion_time: (h.min_local_deletion_time_delta as i64)
                .wrapping_add(DELETION_TIME_EPOCH),
            ttl: h.min_ttl_delta as i64,
        }
    }
    fn timestamp(&self, r: &mut Reader<'_>, field: &'static str) -> Result<i64> {
        Ok((r.uvint(field)? as i64).wrapping_add(self.timestamp))
    }
    fn ldt(&self, r: &mut Reader<'_>, field: &'static str) -> Result<i64> {
        Ok((r.uvint(field)? as i64).wrapping_add(self.local_deletion_time))
    }
    fn ttl(&self, r: &mut Reader<'_>, field: &'static str) -> Result<i64> {
        Ok((r.uvint(field)? as i64).wrapping_add(self.ttl))
    }
    /// `SerializationHeader.readDeletionTime`: markedForDeleteAt, localDeletionTime.
    fn deletion(&self, r: &mut Reader<'_>, field: &'static str) -> Result<i64> {
        let at = self.timestamp(r, field)?;
        self.ldt(r, field)?;
        Ok(at)
    }
}

/// A multi-cell (non-frozen) collection or UDT column: its cells carry a `CellPath`
/// (`ColumnMetadata.isComplex`, `AbstractType.isMultiCell`). Frozen ones are
/// `FrozenType(...)` in the header and simple.
fn is_complex(type_name: &str) -> bool {
    let t = type_name.trim();
    let t = t
        .strip_prefix("org.apache.cassandra.db.marshal.")
        .unwrap_or(t);
    ["ListType(", "SetType(", "MapType(", "UserType("]
        .iter()
        .any(|p| t.starts_with(p))
}

/// Bytes of a simple cell's value when its type has a fixed width (`AbstractType.writeValue`).
/// Counter cells hold a variable-length counter context, whatever the type's width.
fn cell_fixed_len(type_name: &str) -> Option<usize> {
    if type_name.trim().ends_with("CounterColumnType") {
        return None;
    }
    fixed_value_length(type_name)
}

/// A value of a fixed-width type raw, else vint-length-prefixed.
fn value<'a>(r: &mut Reader<'a>, fixed: Option<usize>, field: &'static str) -> Result<&'a [u8]> {
    match fixed {
        Some(n) => r.bytes(n, field),
        None => r.vint_bytes(field),
    }
}

/// `ClusteringPrefix.Serializer.deserializeValuesWithoutSize`: per 32 values a header vint
/// (bit 2i: empty, bit 2i+1: null), then the values that are neither.
fn skip_clustering_values(r: &mut Reader<'_>, types: &[String], n: usize) -> Result<()> {
    if n > types.len() {
        return Err(r.corrupt(format!(
            "clustering prefix of {n} values, but the header has {} clustering types",
            types.len()
        )));
    }
    let mut header = 0u64;
    for (i, t) in types.iter().take(n).enumerate() {
        if i % 32 == 0 {
            header = r.uvint("clustering header")?;
        }
        let bits = header >> (2 * (i % 32));
        if bits & 0b11 == 0 {
            value(r, fixed_value_length(t), "clustering value")?;
        }
    }
    Ok(())
}

/// Partition-level `DeletionTime`: 12 fixed bytes before `oa`; from `oa` one byte 0x80 when
/// live, else 8 + 4 (`DeletionTime.Serializer`, CASSANDRA-18648). Its markedForDeleteAt.
fn partition_deletion(r: &mut Reader<'_>, v: Version) -> Result<Option<i64>> {
    if v.has_uint_deletion_time() {
        let first = r.u8("partition deletion flags")?;
        if first & 0x80 != 0 {
            return Ok(None);
        }
        let rest = r.bytes(7, "partition deletion markedForDeleteAt")?;
        let mut b = [0u8; 8];
        b[0] = first;
        b[1..].copy_from_slice(rest);
        r.u32("partition deletion localDeletionTime")?;
        Ok(Some(i64::from_be_bytes(b)))
    } else {
        let ldt = r.i32("partition deletion localDeletionTime")?;
        let at = r.i64("partition deletion markedForDeleteAt")?;
        Ok((ldt != i32::MAX || at != i64::MIN).then_some(at))
    }
}

/// The columns a row carries (`Columns.Serializer.deserializeSubset`): a bitmap of the
/// missing ones below 64 columns, else a count and a list of indexes.
fn subset(r: &mut Reader<'_>, n: usize) -> Result<Vec<bool>> {
    let at = r.offset();
    let word = r.uvint("columns subset")?;
    if n < 64 {
        if word >> n != 0 {
            return Err(r.corrupt_at(
                at,
                format!("columns subset {word:#x} names columns past the header's {n}"),
            ));
        }
        return Ok((0..n).map(|i| word & (1 << i) == 0).collect());
    }
    let delta = usize::try_from(word)
        .ok()
        .filter(|d| *d <= n)
        .ok_or_else(|| r.corrupt_at(at, format!("columns subset: {word} missing of {n}")))?;
    let count = n - delta;
    let index = |r: &mut Reader<'_>| -> Result<usize> {
        let at = r.offset();
        let i = r.uvint("columns subset index")?;
        usize::try_from(i)
            .ok()
            .filter(|i| *i < n)
            .ok_or_else(|| r.corrupt_at(at, format!("column index {i} of {n}")))
    };
    if count < n / 2 {
        let mut present = vec![false; n];
        for _ in 0..count {
            let i = index(r)?;
            present[i] = true;
        }
        Ok(present)
    } else {
        let mut present = vec![true; n];
        for _ in 0..delta {
            let i = index(r)?;
            present[i] = false;
        }
        Ok(present)
    }
}

/// What a row's liveness info says a cell with USE_ROW_* flags inherits.
struct RowInfo {
    timestamp: Option<i64>,
    /// localExpirationTime when the row is expiring.
    expires: Option<i64>,
}

/// One cell (`Cell.Serializer.deserialize`); `Some((timestamp, value, live))`.
fn cell<'a>(
    r: &mut Reader<'a>,
    mins: &Mins,
    row: &RowInfo,
    col: &HeaderColumn,
    complex: bool,
    now_secs: i64,
) -> Result<(i64, &'a [u8], bool)> {
    let at = r.offset();
    let flags = r.u8("cell flags")?;
    if flags & !0x1f != 0 {
        return Err(r.corrupt_at(at, format!("cell flags {flags:#04x}: unknown bits")));
    }
    let timestamp = if flags & CELL_USE_ROW_TIMESTAMP != 0 {
        row.timestamp
            .ok_or_else(|| r.corrupt_at(at, "cell uses the row timestamp, but the row has none"))?
    } else {
        mins.timestamp(r, "cell timestamp")?
    };
    let deleted = flags & CELL_IS_DELETED != 0;
    let expiring = flags & CELL_IS_EXPIRING != 0;
    let mut expires = None;
    if flags & CELL_USE_ROW_TTL != 0 {
        if expiring {
            expires = row.expires;
        }
    } else {
        if deleted || expiring {
            let ldt = mins.ldt(r, "cell localDeletionTime")?;
            if expiring {
                expires = Some(ldt);
            }
        }
        if expiring {
            mins.ttl(r, "cell ttl")?;
        }
    }
    if complex {
        // CollectionType/UserType cell paths: one vint-length-prefixed buffer.
        r.vint_bytes("cell path")?;
    }
    let v: &[u8] = if flags & CELL_HAS_EMPTY_VALUE != 0 {
        &[]
    } else if complex {
        // The header's type of a complex column is the collection's, never fixed-width.
        r.vint_bytes("cell value")?
    } else {
        value(r, cell_fixed_len(&col.type_name), "cell value")?
    };
    let live = !deleted && expires.is_none_or(|e| e > now_secs);
    Ok((timestamp, v, live))
}

/// The newest live simple cell of regular column `column` in the partition at the start of
/// `r` (its u16 key length), shadowed by partition, row and open range deletions as
/// Cassandra shadows them (`DeletionTime.deletes`: `timestamp <= markedForDeleteAt`).
/// Consumes the partition through END_OF_PARTITION. `None` when the column is not in the
/// header or no live cell of it is there.
pub fn newest_live_cell(
    r: &mut Reader<'_>,
    version: Version,
    header: &SerializationHeader,
    column: &[u8],
    now_secs: i64,
) -> Result<Option<CellValue>> {
    let key_len = r.u16("partition key length")? as usize;
    r.bytes(key_len, "partition key")?;
    let partition_deleted = partition_deletion(r, version)?;
    let mins = Mins::of(header);
    let clustering = &header.clustering_types;
    let target = header.regular_columns.iter().position(|c| c.name == column);
    if let Some(i) = target {
        if is_complex(&header.regular_columns[i].type_name) {
            return Err(FormatError::unsupported(
                r.file(),
                None,
                format!(
                    "column {} is a multi-cell collection, not a simple cell",
                    String::from_utf8_lossy(column)
                ),
            ));
        }
    }
    let mut best: Option<CellValue> = None;
    // markedForDeleteAt of the range tombstone open at this point, if any.
    let mut open_range: Option<i64> = None;
    loop {
        let at = r.offset();
        let flags = r.u8("unfiltered flags")?;
        if flags == END_OF_PARTITION {
            return Ok(best);
        }
        if flags & END_OF_PARTITION != 0 {
            return Err(r.corrupt_at(at, format!("unfiltered flags {flags:#04x}")));
        }
        let ext = if flags & EXTENSION_FLAG != 0 {
            r.u8("unfiltered extended flags")?
        } else {
            0
        };
        if flags & IS_MARKER != 0 {
            // RangeTombstoneMarker: ClusteringBoundOrBoundary, then the body.
            let kind = r.u8("marker bound kind")?;
            let size = r.u16("marker bound size")? as usize;
            skip_clustering_values(r, clustering, size)?;
            let size_at = r.offset();
            let body = r.uvint("marker size")?;
            let start = r.offset();
            r.uvint("marker previous unfiltered size")?;
            // ClusteringPrefix.Kind: 2 and 5 are boundaries (close then open), 1 and 7 open,
            // 0 and 6 close.
            match kind {
                2 | 5 => {
                    mins.deletion(r, "marker end deletion")?;
                    open_range = Some(mins.deletion(r, "marker start deletion")?);
                }
                1 | 7 => open_range = Some(mins.deletion(r, "marker deletion")?),
                0 | 6 => {
                    mins.deletion(r, "marker deletion")?;
                    open_range = None;
                }
                k => {
                    return Err(r.corrupt_at(at, format!("range tombstone bound kind {k}")));
                }
            }
            check_size(r, size_at, body, start, "marker")?;
            continue;
        }
        let is_static = ext & IS_STATIC != 0;
        let columns = if is_static {
            &header.static_columns
        } else {
            skip_clustering_values(r, clustering, clustering.len())?;
            &header.regular_columns
        };
        let size_at = r.offset();
        let body = r.uvint("row size")?;
        let start = r.offset();
        r.uvint("row previous unfiltered size")?;
        let timestamp = if flags & HAS_TIMESTAMP != 0 {
            Some(mins.timestamp(r, "row timestamp")?)
        } else {
            None
        };
        let expires = if flags & HAS_TTL != 0 {
            mins.ttl(r, "row ttl")?;
            Some(mins.ldt(r, "row localExpirationTime")?)
        } else {
            None
        };
        let row_deleted = if flags & HAS_DELETION != 0 {
            Some(mins.deletion(r, "row deletion")?)
        } else {
            None
        };
        let present = if flags & HAS_ALL_COLUMNS != 0 {
            vec![true; columns.len()]
        } else {
            subset(r, columns.len())?
        };
        let row = RowInfo { timestamp, expires };
        let shadow = [partition_deleted, row_deleted, open_range]
            .into_iter()
            .flatten()
            .max();
        for (i, col) in columns.iter().enumerate() {
            if !present[i] {
                continue;
            }
            if is_complex(&col.type_name) {
                if flags & HAS_COMPLEX_DELETION != 0 {
                    mins.deletion(r, "complex deletion")?;
                }
                let n = r.uvint("complex cell count")?;
                for _ in 0..n {
                    cell(r, &mins, &row, col, true, now_secs)?;
                }
                continue;
            }
            let cell_at = r.offset();
            let (ts, v, live) = cell(r, &mins, &row, col, false, now_secs)?;
            if !is_static
                && Some(i) == target
                && live
                && shadow.is_none_or(|d| ts > d)
                && best.as_ref().is_none_or(|b| ts > b.timestamp)
            {
                best = Some(CellValue {
                    value: v.to_vec(),
                    timestamp: ts,
                    offset: cell_at,
                });
            }
        }
        check_size(r, size_at, body, start, "row")?;
    }
}

fn check_size(r: &Reader<'_>, size_at: u64, body: u64, start: u64, what: &str) -> Result<()> {
    let read = r.offset() - start;
    if read != body {
        return Err(r.corrupt_at(
            size_at,
            format!("{what} size says {body} bytes, its fields took {read}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sstable::bytes::Put;
    use std::path::Path;

    fn col(name: &str, t: &str) -> HeaderColumn {
        HeaderColumn {
            name: name.as_bytes().to_vec(),
            type_name: format!("org.apache.cassandra.db.marshal.{t}"),
        }
    }

    fn header() -> SerializationHeader {
        SerializationHeader {
            min_timestamp_delta: 1000,
            min_local_deletion_time_delta: 0,
            min_ttl_delta: 0,
            key_type: "org.apache.cassandra.db.marshal.UTF8Type".into(),
            clustering_types: vec![],
            static_columns: vec![],
            // Sorted as Cassandra sorts them: simple before complex.
            regular_columns: vec![
                col("bootstrapped", "UTF8Type"),
                col("gossip_generation", "Int32Type"),
                col("release_version", "UTF8Type"),
                col(
                    "tokens",
                    "SetType(org.apache.cassandra.db.marshal.UTF8Type)",
                ),
            ],
        }
    }

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    /// A partition 'local': one row with a live timestamp, all columns but
    /// gossip_generation (subset), a release_version cell using the row timestamp, then a
    /// second row whose own-timestamp release_version cell is newer, an expired one, and a
    /// deleted one.
    fn sample(version: Version, release: &str) -> Vec<u8> {
        let mut p = Vec::new();
        p.put_u16(5);
        p.extend_from_slice(b"local");
        if version.has_uint_deletion_time() {
            p.push(0x80);
        } else {
            p.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0]);
        }
        // Row 1: HAS_TIMESTAMP, subset without gossip_generation (bit 1 missing).
        let mut body = Vec::new();
        body.put_uvint(0); // prevSize
        body.put_uvint(7); // row timestamp delta
        body.put_uvint(0b0010);
        body.push(CELL_USE_ROW_TIMESTAMP); // bootstrapped
        body.put_vint_bytes(b"COMPLETED");
        body.push(CELL_USE_ROW_TIMESTAMP); // release_version
        body.put_vint_bytes(b"0.0.1");
        body.put_uvint(2); // tokens: two set cells, empty values
        for t in [b"-1".as_slice(), b"42"] {
            body.push(CELL_USE_ROW_TIMESTAMP | CELL_HAS_EMPTY_VALUE);
            body.put_vint_bytes(t);
        }
        p.push(HAS_TIMESTAMP);
        p.put_uvint(body.len() as u64);
        p.extend_from_slice(&body);
        // Row 2: HAS_ALL_COLUMNS | HAS_COMPLEX_DELETION, no row timestamp.
        let mut body = Vec::new();
        body.put_uvint(9);
        body.push(0); // bootstrapped: own timestamp, older than row 1's
        body.put_uvint(3);
        body.put_vint_bytes(b"x");
        body.push(0); // gossip_generation: Int32Type, fixed 4 bytes
        body.put_uvint(3);
        body.extend_from_slice(&7i32.to_be_bytes());
        body.push(0); // release_version at delta 50
        body.put_uvint(50);
        body.put_vint_bytes(release.as_bytes());
        body.put_uvint(1); // tokens complex deletion
        body.put_uvint(1);
        body.put_uvint(0); // no cells
        p.push(HAS_ALL_COLUMNS | HAS_COMPLEX_DELETION);
        p.put_uvint(body.len() as u64);
        p.extend_from_slice(&body);
        // Row 3: a newer release_version that expired (ldt 0 + epoch < now), and a newer
        // deleted one.
        for (flags, extra) in [
            (CELL_IS_EXPIRING, vec![0u8, 5]), // ldt delta 0, ttl 5
            (CELL_IS_DELETED | CELL_HAS_EMPTY_VALUE, vec![0u8]),
        ] {
            let mut body = Vec::new();
            body.put_uvint(0);
            body.put_uvint(0b1011); // only release_version
            body.push(flags);
            body.put_uvint(90);
            body.extend_from_slice(&extra);
            if flags & CELL_HAS_EMPTY_VALUE == 0 {
                body.put_vint_bytes(b"9.9.9");
            }
            p.push(0);
            p.put_uvint(body.len() as u64);
            p.extend_from_slice(&body);
        }
        p.push(END_OF_PARTITION);
        p
    }

    fn read(p: &[u8], version: Version, column: &str) -> Result<Option<CellValue>> {
        let mut r = Reader::new(Path::new("Data.db"), p);
        let got = newest_live_cell(&mut r, version, &header(), column.as_bytes(), 2_000_000_000)?;
        r.expect_end("partition")?;
        Ok(got)
    }

    #[test]
    fn row_newest_live_simple_cell_by_name() {
        for ver in ["nb", "oa", "mc"] {
            let p = sample(v(ver), "4.1.10");
            let got = read(&p, v(ver), "release_version").unwrap().unwrap();
            assert_eq!(got.value, b"4.1.10", "{ver}");
            assert_eq!(got.timestamp, TIMESTAMP_EPOCH + 1000 + 50);
            assert_eq!(
                read(&p, v(ver), "bootstrapped").unwrap().unwrap().value,
                b"COMPLETED"
            );
            assert_eq!(
                read(&p, v(ver), "gossip_generation")
                    .unwrap()
                    .unwrap()
                    .value,
                7i32.to_be_bytes()
            );
            assert_eq!(read(&p, v(ver), "no_such_column").unwrap(), None);
            assert_eq!(
                read(&p, v(ver), "tokens").unwrap_err().kind(),
                "unsupported"
            );
        }
    }

    #[test]
    fn row_partition_deletion_shadows_older_cells() {
        let mut p = sample(v("oa"), "4.1.10");
        // markedForDeleteAt above every cell: nothing is live.
        let at = TIMESTAMP_EPOCH + 1000 + 1_000_000;
        let mut del = at.to_be_bytes().to_vec();
        del.extend_from_slice(&1u32.to_be_bytes());
        p.splice(7..8, del);
        assert_eq!(read(&p, v("oa"), "release_version").unwrap(), None);
    }

    #[test]
    fn row_every_truncation_errors() {
        let p = sample(v("oa"), "4.1.10");
        for n in 0..p.len() {
            let e = read(&p[..n], v("oa"), "release_version").unwrap_err();
            assert!(matches!(e.kind(), "truncated" | "corrupt"), "{n}: {e}");
            assert!(e.to_string().contains("Data.db"), "{e}");
        }
        // A flipped byte anywhere never panics.
        for i in 0..p.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut q = p.clone();
                q[i] ^= x;
                let _ = read(&q, v("oa"), "release_version");
            }
        }
    }

    #[test]
    fn row_size_mismatch_is_corrupt() {
        let mut p = sample(v("oa"), "4.1.10");
        // Row 1's size byte sits after key (2+5), deletion (1) and flags (1).
        p[9] += 1;
        let e = read(&p, v("oa"), "release_version").unwrap_err();
        assert_eq!(e.kind(), "corrupt", "{e}");
    }

    #[test]
    fn row_markers_and_static_rows_are_skipped() {
        let mut h = header();
        h.clustering_types = vec!["org.apache.cassandra.db.marshal.Int32Type".into()];
        h.static_columns = vec![col("s", "UTF8Type")];
        let mut p = Vec::new();
        p.put_u16(1);
        p.push(b'k');
        p.push(0x80);
        // Static row: one cell "s".
        let mut body = vec![0u8];
        body.put_uvint(0);
        body.put_uvint(1);
        body.put_vint_bytes(b"static");
        p.extend_from_slice(&[EXTENSION_FLAG | HAS_ALL_COLUMNS, IS_STATIC]);
        p.put_uvint(body.len() as u64);
        p.extend_from_slice(&body);
        // Open marker (INCL_START, one int value) deleting up to delta 100.
        p.extend_from_slice(&[IS_MARKER, 1, 0, 1]);
        p.put_uvint(0);
        p.extend_from_slice(&1i32.to_be_bytes());
        let mut body = vec![0u8];
        body.put_uvint(100);
        body.put_uvint(0);
        p.put_uvint(body.len() as u64);
        p.extend_from_slice(&body);
        // Row at clustering 2: release_version at delta 60 (shadowed).
        let row = |p: &mut Vec<u8>, ck: i32, ts: u64, val: &[u8]| {
            p.push(0);
            p.put_uvint(0);
            p.extend_from_slice(&ck.to_be_bytes());
            let mut body = vec![0u8];
            body.put_uvint(0b1011);
            body.push(0);
            body.put_uvint(ts);
            body.put_vint_bytes(val);
            p.put_uvint(body.len() as u64);
            p.extend_from_slice(&body);
        };
        row(&mut p, 2, 60, b"shadowed");
        // Close marker (INCL_END).
        p.extend_from_slice(&[IS_MARKER, 6, 0, 1]);
        p.put_uvint(0);
        p.extend_from_slice(&3i32.to_be_bytes());
        let mut body = vec![0u8];
        body.put_uvint(100);
        body.put_uvint(0);
        p.put_uvint(body.len() as u64);
        p.extend_from_slice(&body);
        row(&mut p, 4, 20, b"live");
        p.push(END_OF_PARTITION);
        let mut r = Reader::new(Path::new("Data.db"), &p);
        let got = newest_live_cell(&mut r, v("oa"), &h, b"release_version", 0).unwrap();
        assert_eq!(got.unwrap().value, b"live");
        r.expect_end("partition").unwrap();
    }
}

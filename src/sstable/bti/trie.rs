//! On-disk trie nodes shared by Partitions.db and Rows.db (`io/tries/TrieNode.java`), and
//! the page-aware writer that lays them out (`io/tries/IncrementalTrieWriterPageAware.java`
//! on top of `IncrementalTrieWriterBase.java`).
//!
//! A node starts with one header byte: the high nibble is the node type's ordinal, the low
//! nibble the payload flags (`TrieNode.at`, `payloadFlags`), except for the two
//! "no payload" single types, whose low nibble holds delta bits. Child pointers are
//! unsigned *backward* distances from the node's own position (`TrieNode.transition`):
//! children are always written before their parents. The payload, whose format belongs to
//! the index using the trie, follows the node.
//!
//! Cassandra's reader (`Walker.go`) decodes a node and its payload from the one 4 KiB
//! buffer that holds the node's first byte, so a node that crosses a page boundary is
//! unreadable for Cassandra: the decoder here reports it as corruption, and the writer
//! never produces one.

use std::io::{self, Write};
use std::path::Path;

use super::super::error::{FormatError, Result};

/// `PageAware.PAGE_SIZE`: Cassandra's rebufferers hand out aligned 4 KiB pages.
pub const PAGE_SIZE: u64 = 4096;

// ---------------------------------------------------------------------------------------
// Node types (`TrieNode.Types`).
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    PayloadOnly,
    SingleNoPayload4,
    Single,
    SingleNoPayload12,
    Sparse,
    Sparse12,
    Dense,
    Dense12,
}

/// One of the 16 node types: its ordinal, layout and pointer width in bytes (0 for the
/// fractional 4- and 12-bit widths, `TrieNode.FRACTIONAL_BYTES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeType {
    ordinal: u8,
    shape: Shape,
    bytes_per_pointer: usize,
}

const fn t(ordinal: u8, shape: Shape, bytes_per_pointer: usize) -> NodeType {
    NodeType {
        ordinal,
        shape,
        bytes_per_pointer,
    }
}

const PAYLOAD_ONLY: NodeType = t(0, Shape::PayloadOnly, 0);
const SINGLE_NOPAYLOAD_4: NodeType = t(1, Shape::SingleNoPayload4, 0);
const SINGLE_8: NodeType = t(2, Shape::Single, 1);
const SINGLE_NOPAYLOAD_12: NodeType = t(3, Shape::SingleNoPayload12, 0);
const SINGLE_16: NodeType = t(4, Shape::Single, 2);
const SPARSE_8: NodeType = t(5, Shape::Sparse, 1);
const SPARSE_12: NodeType = t(6, Shape::Sparse12, 0);
const SPARSE_16: NodeType = t(7, Shape::Sparse, 2);
const SPARSE_24: NodeType = t(8, Shape::Sparse, 3);
const SPARSE_40: NodeType = t(9, Shape::Sparse, 5);
const DENSE_12: NodeType = t(10, Shape::Dense12, 0);
const DENSE_16: NodeType = t(11, Shape::Dense, 2);
const DENSE_24: NodeType = t(12, Shape::Dense, 3);
const DENSE_32: NodeType = t(13, Shape::Dense, 4);
const DENSE_40: NodeType = t(14, Shape::Dense, 5);
const LONG_DENSE: NodeType = t(15, Shape::Dense, 8);

/// Indexed by ordinal (`Types.values`).
const VALUES: [NodeType; 16] = [
    PAYLOAD_ONLY,
    SINGLE_NOPAYLOAD_4,
    SINGLE_8,
    SINGLE_NOPAYLOAD_12,
    SINGLE_16,
    SPARSE_8,
    SPARSE_12,
    SPARSE_16,
    SPARSE_24,
    SPARSE_40,
    DENSE_12,
    DENSE_16,
    DENSE_24,
    DENSE_32,
    DENSE_40,
    LONG_DENSE,
];

/// `Types.singles`, `sparses`, `denses`: the type for each pointer-size class.
const SINGLES: [NodeType; 8] = [
    SINGLE_NOPAYLOAD_4,
    SINGLE_8,
    SINGLE_NOPAYLOAD_12,
    SINGLE_16,
    DENSE_24,
    DENSE_32,
    DENSE_40,
    LONG_DENSE,
];
const SPARSES: [NodeType; 8] = [
    SPARSE_8, SPARSE_8, SPARSE_12, SPARSE_16, SPARSE_24, SPARSE_40, SPARSE_40, LONG_DENSE,
];
const DENSES: [NodeType; 8] = [
    DENSE_12, DENSE_12, DENSE_12, DENSE_16, DENSE_24, DENSE_32, DENSE_40, LONG_DENSE,
];

impl NodeType {
    /// `TrieNode.fits` and its overrides: can a (positive) backward delta be stored?
    fn fits(self, delta: u64) -> bool {
        match self.shape {
            Shape::SingleNoPayload4 => delta <= 0xF,
            Shape::SingleNoPayload12 | Shape::Sparse12 | Shape::Dense12 => delta <= 0xFFF,
            _ if self.bytes_per_pointer >= 8 => true,
            _ => delta < (1u64 << (self.bytes_per_pointer * 8)),
        }
    }

    /// `sizeofNode` for a node with these (sorted) transitions, without its payload.
    fn size(self, transitions: &[u8]) -> usize {
        let c = transitions.len();
        let range = || match (transitions.first(), transitions.last()) {
            (Some(&l), Some(&r)) => (r - l) as usize + 1,
            _ => 0,
        };
        match self.shape {
            Shape::PayloadOnly => 1,
            Shape::SingleNoPayload4 => 2,
            Shape::SingleNoPayload12 => 3,
            Shape::Single => 2 + self.bytes_per_pointer,
            Shape::Sparse => 2 + c * (1 + self.bytes_per_pointer),
            Shape::Sparse12 => 2 + (c * 5).div_ceil(2),
            Shape::Dense => 3 + range() * self.bytes_per_pointer,
            Shape::Dense12 => 3 + (range() * 3).div_ceil(2),
        }
    }

    /// `TrieNode.serialize`: the node without its payload. `deltas[i]` is the backward
    /// distance to the child reached by `transitions[i]`; each must fit this type (the
    /// caller chose the type with `type_for`).
    fn serialize(self, out: &mut Vec<u8>, transitions: &[u8], deltas: &[u64], payload_bits: u8) {
        let header = self.ordinal << 4;
        match self.shape {
            Shape::PayloadOnly => out.push(header | (payload_bits & 0xF)),
            Shape::SingleNoPayload4 => {
                out.push(header | (deltas[0] as u8 & 0xF));
                out.push(transitions[0]);
            }
            Shape::SingleNoPayload12 => {
                out.push(header | ((deltas[0] >> 8) as u8 & 0xF));
                out.push(deltas[0] as u8);
                out.push(transitions[0]);
            }
            Shape::Single => {
                out.push(header | (payload_bits & 0xF));
                out.push(transitions[0]);
                write_sized(out, deltas[0], self.bytes_per_pointer);
            }
            Shape::Sparse | Shape::Sparse12 => {
                out.push(header | (payload_bits & 0xF));
                out.push(transitions.len() as u8);
                out.extend_from_slice(transitions);
                if self.shape == Shape::Sparse {
                    for &d in deltas {
                        write_sized(out, d, self.bytes_per_pointer);
                    }
                } else {
                    write_12_bits(out, deltas.iter().copied());
                }
            }
            Shape::Dense | Shape::Dense12 => {
                out.push(header | (payload_bits & 0xF));
                let (l, r) = (transitions[0], transitions[transitions.len() - 1]);
                out.push(l);
                out.push(r - l);
                // Absent transitions inside the range are written as 0 (`Dense.NULL_VALUE`).
                let mut all = vec![0u64; (r - l) as usize + 1];
                for (&tr, &d) in transitions.iter().zip(deltas) {
                    all[(tr - l) as usize] = d;
                }
                if self.shape == Shape::Dense {
                    for d in all {
                        write_sized(out, d, self.bytes_per_pointer);
                    }
                } else {
                    write_12_bits(out, all.into_iter());
                }
            }
        }
    }
}

/// `SizedInts.write`: the low `size` bytes of `v`, big-endian.
pub(crate) fn write_sized(out: &mut Vec<u8>, v: u64, size: usize) {
    for i in (0..size).rev() {
        out.push((v >> (i * 8)) as u8);
    }
}

/// `SizedInts.read`: `bytes.len()` (0..=8) big-endian bytes, sign-extended.
pub(crate) fn read_sized_signed(bytes: &[u8]) -> i64 {
    if bytes.is_empty() {
        return 0;
    }
    let mut v: i64 = bytes[0] as i8 as i64;
    for &b in &bytes[1..] {
        v = (v << 8) | b as i64;
    }
    v
}

/// `SizedInts.nonZeroSize`: bytes for a signed value, sign bit included, at least 1.
pub(crate) fn non_zero_size(v: i64) -> usize {
    let v = if v < 0 { !v } else { v } as u64;
    let lz = v.leading_zeros() as usize;
    (64 - lz + 1).div_ceil(8)
}

/// `TrieNode.write12Bits` for a whole list: pairs packed in 3 bytes, an odd last value
/// in the high 12 bits of a short.
fn write_12_bits(out: &mut Vec<u8>, values: impl Iterator<Item = u64>) {
    let mut carry: Option<u16> = None;
    for v in values {
        let v = (v & 0xFFF) as u16;
        match carry.take() {
            None => {
                out.push((v >> 4) as u8);
                carry = Some(v << 4);
            }
            Some(c) => {
                out.push((c as u8) | (v >> 8) as u8);
                out.push(v as u8);
            }
        }
    }
    if let Some(c) = carry {
        out.push(c as u8);
    }
}

// ---------------------------------------------------------------------------------------
// Decoding.
// ---------------------------------------------------------------------------------------

/// A decoded node: its children (in transition order) and where its payload is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub pos: u64,
    pub ordinal: u8,
    /// The low nibble of the header for types that can carry a payload, else 0.
    pub payload_flags: u8,
    /// File offset just after the node: where its payload starts.
    pub payload_pos: u64,
    /// The payload must end at or before this offset: the end of the node's page, or of
    /// the trie region if that comes first.
    pub limit: u64,
    /// (transition byte, child position), strictly increasing transitions.
    pub children: Vec<(u8, u64)>,
}

/// Decodes the node at `pos` of a trie stored in `buf[..region_end]`. Every pointer is
/// checked: a child must lie strictly before its parent (so a walk always ends), the node
/// must be within `region_end`, and it must not cross a page boundary.
pub(crate) fn read_node(file: &Path, buf: &[u8], pos: u64, region_end: u64) -> Result<Node> {
    let region_end = region_end.min(buf.len() as u64);
    if pos >= region_end {
        return Err(FormatError::corrupt(
            file,
            Some(pos),
            format!("trie node pointer {pos} is outside the trie (which ends at {region_end})"),
        ));
    }
    let limit = ((pos / PAGE_SIZE + 1) * PAGE_SIZE).min(region_end);
    // Within bounds by the checks above (pos < limit <= buf.len()).
    let b = &buf[pos as usize..limit as usize];
    let need = |n: usize, what: &str| -> Result<()> {
        if b.len() < n {
            Err(FormatError::corrupt(
                file,
                Some(pos),
                format!(
                    "trie node needs {n} bytes for {what} but only {} remain before {} \
                     (a node may not cross a page boundary or the end of the trie)",
                    b.len(),
                    if limit == region_end {
                        "the end of the trie"
                    } else {
                        "the page boundary"
                    }
                ),
            ))
        } else {
            Ok(())
        }
    };
    let header = b[0];
    let ty = VALUES[(header >> 4) as usize];
    let flags = header & 0xF;
    let child = |delta: u64, tr: u8| -> Result<(u8, u64)> {
        if delta == 0 || delta > pos {
            return Err(FormatError::corrupt(
                file,
                Some(pos),
                format!(
                    "trie node (type {}) has child pointer -{delta} for transition {tr:#04x}: \
                     children must lie before their parent and inside the file",
                    ty.ordinal
                ),
            ));
        }
        Ok((tr, pos - delta))
    };
    let sized = |off: usize, n: usize| -> u64 {
        b[off..off + n]
            .iter()
            .fold(0u64, |acc, &x| (acc << 8) | x as u64)
    };
    let twelve = |base: usize, i: usize| -> u64 {
        let o = base + (3 * i) / 2;
        let word = ((b[o] as u16) << 8) | b[o + 1] as u16;
        (if i & 1 == 0 { word >> 4 } else { word } & 0xFFF) as u64
    };
    let mut children = Vec::new();
    let (payload_flags, size) = match ty.shape {
        Shape::PayloadOnly => (flags, 1),
        Shape::SingleNoPayload4 => {
            need(2, "a 4-bit single node")?;
            children.push(child(flags as u64, b[1])?);
            (0, 2)
        }
        Shape::SingleNoPayload12 => {
            need(3, "a 12-bit single node")?;
            children.push(child(((flags as u64) << 8) | b[1] as u64, b[2])?);
            (0, 3)
        }
        Shape::Single => {
            let n = 2 + ty.bytes_per_pointer;
            need(n, "a single node")?;
            children.push(child(sized(2, ty.bytes_per_pointer), b[1])?);
            (flags, n)
        }
        Shape::Sparse | Shape::Sparse12 => {
            need(2, "a sparse node's count")?;
            let c = b[1] as usize;
            if c == 0 {
                return Err(FormatError::corrupt(
                    file,
                    Some(pos),
                    "sparse trie node with no children",
                ));
            }
            let n = if ty.shape == Shape::Sparse {
                2 + c * (1 + ty.bytes_per_pointer)
            } else {
                2 + (5 * c).div_ceil(2)
            };
            need(n, "a sparse node's transitions and pointers")?;
            for i in 0..c {
                let tr = b[2 + i];
                if i > 0 && tr <= b[1 + i] {
                    return Err(FormatError::corrupt(
                        file,
                        Some(pos),
                        format!("sparse trie node transitions not increasing at index {i}"),
                    ));
                }
                let delta = if ty.shape == Shape::Sparse {
                    sized(2 + c + i * ty.bytes_per_pointer, ty.bytes_per_pointer)
                } else {
                    twelve(2 + c, i)
                };
                children.push(child(delta, tr)?);
            }
            (flags, n)
        }
        Shape::Dense | Shape::Dense12 => {
            need(3, "a dense node's range")?;
            let first = b[1];
            let len = b[2] as usize + 1;
            if first as usize + len > 256 {
                return Err(FormatError::corrupt(
                    file,
                    Some(pos),
                    format!("dense trie node range {first}+{len} goes past byte 255"),
                ));
            }
            let n = if ty.shape == Shape::Dense {
                3 + len * ty.bytes_per_pointer
            } else {
                3 + (len * 3).div_ceil(2)
            };
            need(n, "a dense node's pointers")?;
            for i in 0..len {
                let delta = if ty.shape == Shape::Dense {
                    sized(3 + i * ty.bytes_per_pointer, ty.bytes_per_pointer)
                } else {
                    twelve(3, i)
                };
                // 0 means "no transition" (`Dense.NULL_VALUE`).
                if delta != 0 {
                    children.push(child(delta, first + i as u8)?);
                }
            }
            if children.is_empty() {
                return Err(FormatError::corrupt(
                    file,
                    Some(pos),
                    "dense trie node with no children",
                ));
            }
            (flags, n)
        }
    };
    Ok(Node {
        pos,
        ordinal: ty.ordinal,
        payload_flags,
        payload_pos: pos + size as u64,
        limit,
        children,
    })
}

/// The payload bytes `[node.payload_pos, +len)`, checked to stay in the node's page.
pub(crate) fn payload_bytes<'a>(
    file: &Path,
    buf: &'a [u8],
    node: &Node,
    len: usize,
) -> Result<&'a [u8]> {
    let end = node.payload_pos + len as u64;
    if end > node.limit {
        return Err(FormatError::corrupt(
            file,
            Some(node.pos),
            format!(
                "trie node payload of {len} bytes at {} ends at {end}, past {} \
                 (a payload may not cross a page boundary or the end of the trie)",
                node.payload_pos, node.limit
            ),
        ));
    }
    Ok(&buf[node.payload_pos as usize..end as usize])
}

/// One step of an in-order walk: the node and, for a node with a payload, the transitions
/// that led to it (empty for a node without one: no reader needs that path, and copying it
/// at every node would make a deep trie quadratic to walk).
pub(crate) struct Visit {
    pub node: Node,
    pub path: Vec<u8>,
}

/// Depth-first walk in key order: a node's payload comes before its children (its path is
/// a prefix of theirs), children by transition byte (`Walker`, `ValueIterator`).
///
/// A trie is a tree whose nodes do not overlap, so a valid walk of the region
/// `[region_start, region_end)` visits at most one node per byte of it; more visits mean
/// shared or overlapping children, which a crafted file could use to make the walk
/// exponential, and are reported as corruption, as is a node outside the region and a
/// path deeper than any key the index can hold (`max_depth`).
pub(crate) struct Walk<'a> {
    file: &'a Path,
    buf: &'a [u8],
    region_start: u64,
    region_end: u64,
    max_depth: usize,
    /// (node, index of the next child to visit)
    stack: Vec<(Node, usize)>,
    path: Vec<u8>,
    pending_root: Option<u64>,
    visits: u64,
}

impl<'a> Walk<'a> {
    pub fn new(
        file: &'a Path,
        buf: &'a [u8],
        root: u64,
        region: std::ops::Range<u64>,
        max_depth: usize,
    ) -> Self {
        Walk {
            file,
            buf,
            region_start: region.start,
            region_end: region.end,
            max_depth,
            stack: Vec::new(),
            path: Vec::new(),
            pending_root: Some(root),
            visits: 0,
        }
    }

    fn enter(&mut self, pos: u64) -> Result<Visit> {
        self.visits += 1;
        let size = self.region_end.saturating_sub(self.region_start);
        if self.visits > size {
            return Err(FormatError::corrupt(
                self.file,
                Some(pos),
                format!(
                    "trie walk visited more nodes than the trie region [{}, {}) has bytes: \
                     children are shared or overlap",
                    self.region_start, self.region_end
                ),
            ));
        }
        if pos < self.region_start {
            return Err(FormatError::corrupt(
                self.file,
                Some(pos),
                format!(
                    "trie node lies before its region [{}, {})",
                    self.region_start, self.region_end
                ),
            ));
        }
        if self.path.len() > self.max_depth {
            return Err(FormatError::corrupt(
                self.file,
                Some(pos),
                format!(
                    "trie path is {} transitions deep, deeper than the longest key this index \
                     can hold ({})",
                    self.path.len(),
                    self.max_depth
                ),
            ));
        }
        let node = read_node(self.file, self.buf, pos, self.region_end)?;
        let path = if node.payload_flags != 0 {
            self.path.clone()
        } else {
            Vec::new()
        };
        let visit = Visit {
            node: node.clone(),
            path,
        };
        self.stack.push((node, 0));
        Ok(visit)
    }

    /// The next node in walk order, or `None` when the walk is over.
    pub fn next_node(&mut self) -> Result<Option<Visit>> {
        if let Some(root) = self.pending_root.take() {
            return self.enter(root).map(Some);
        }
        loop {
            let Some((node, next)) = self.stack.last_mut() else {
                return Ok(None);
            };
            if let Some(&(tr, child)) = node.children.get(*next) {
                *next += 1;
                self.path.push(tr);
                return self.enter(child).map(Some);
            }
            self.stack.pop();
            // The root has no transition; every other level pushed one.
            if !self.stack.is_empty() {
                self.path.pop();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Writing: `IncrementalTrieWriterPageAware`.
// ---------------------------------------------------------------------------------------

/// What a trie stores at a node, as its index serializes it (`TrieSerializer`).
pub(crate) trait Payload {
    /// The 4 payload flag bits written in the node's header.
    fn flags(&self) -> u8;
    /// Bytes written after the node.
    fn size(&self) -> usize;
    fn write(&self, out: &mut Vec<u8>);
}

const UNSET: i64 = -1;

struct WNode<P> {
    /// 0..=255, or 256 for the comparison sentinel of `layoutChildren`.
    transition: u16,
    children: Vec<usize>,
    payload: Option<P>,
    file_pos: i64,
    branch_size: i64,
    node_size: i64,
    has_out_of_page_in_branch: bool,
    has_out_of_page_children: bool,
}

impl<P> WNode<P> {
    fn new(transition: u16) -> Self {
        // As `IncrementalTrieWriterPageAware.Node`: sizes -1, hasOutOfPageChildren forced
        // true until the node is completed.
        WNode {
            transition,
            children: Vec::new(),
            payload: None,
            file_pos: UNSET,
            branch_size: -1,
            node_size: -1,
            has_out_of_page_in_branch: false,
            has_out_of_page_children: true,
        }
    }
}

fn invariant(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("trie writer: {what}"))
}

/// A port of Cassandra's page-aware incremental trie writer: keys are added in strictly
/// increasing order, completed nodes are kept in memory until their branch outgrows a
/// page, then whole branches that fit are written to the current page (largest first) and
/// the rest start a new one. The output is append-only; memory is the current key's path
/// plus completed branches that are each under a page.
pub(crate) struct TrieWriter<P, W> {
    out: W,
    /// File offset of the next byte written.
    pos: u64,
    nodes: Vec<WNode<P>>,
    free: Vec<usize>,
    stack: Vec<usize>,
    prev: Vec<u8>,
    has_prev: bool,
    count: u64,
    scratch: Vec<u8>,
}

/// What `TrieWriter::finish` leaves: where the root is, where the trie ends (the root is
/// written last, so it ends there), how many keys were added, and the output.
pub(crate) struct Finished<W> {
    pub root: u64,
    pub end: u64,
    pub count: u64,
    pub out: W,
}

const MAX_BYTES_PER_PAGE: i64 = PAGE_SIZE as i64;

impl<P: Payload, W: Write> TrieWriter<P, W> {
    /// A writer whose first byte lands at file offset `start` (pages are aligned to the
    /// file, not to the trie).
    pub fn new(out: W, start: u64) -> Self {
        let mut w = TrieWriter {
            out,
            pos: start,
            nodes: Vec::new(),
            free: Vec::new(),
            stack: Vec::new(),
            prev: Vec::new(),
            has_prev: false,
            count: 0,
            scratch: Vec::new(),
        };
        let root = w.alloc(0);
        w.stack.push(root);
        w
    }

    fn alloc(&mut self, transition: u16) -> usize {
        let n = WNode::new(transition);
        match self.free.pop() {
            Some(i) => {
                self.nodes[i] = n;
                i
            }
            None => {
                self.nodes.push(n);
                self.nodes.len() - 1
            }
        }
    }

    /// `IncrementalTrieWriterBase.add`.
    pub fn add(&mut self, key: &[u8], payload: P) -> io::Result<()> {
        self.count += 1;
        let mut stackpos = 0;
        if self.has_prev {
            let common = key
                .iter()
                .zip(&self.prev)
                .take_while(|(a, b)| a == b)
                .count();
            // The byte after the common prefix (END_OF_STREAM = -1 past the end) must grow.
            let n = key.get(common).map_or(-1, |&b| b as i32);
            let p = self.prev.get(common).map_or(-1, |&b| b as i32);
            if n <= p {
                return Err(invariant(format!(
                    "keys must be unique and increasing; got {key:02x?} after {:02x?}",
                    self.prev
                )));
            }
            stackpos = common;
        }
        self.prev.clear();
        self.prev.extend_from_slice(key);
        self.has_prev = true;

        while self.stack.len() > stackpos + 1 {
            self.complete_last()?;
        }
        let mut node = *self
            .stack
            .last()
            .ok_or_else(|| invariant("empty stack".into()))?;
        for &b in &key[stackpos..] {
            let child = self.alloc(b as u16);
            self.nodes[node].children.push(child);
            self.stack.push(child);
            node = child;
        }
        if self.nodes[node].payload.is_some() {
            return Err(invariant("payload set twice".into()));
        }
        self.nodes[node].payload = Some(payload);
        Ok(())
    }

    fn complete_last(&mut self) -> io::Result<usize> {
        let node = self
            .stack
            .pop()
            .ok_or_else(|| invariant("empty stack".into()))?;
        self.complete(node)?;
        Ok(node)
    }

    /// Writes whatever is not written yet and returns the root's position
    /// (`IncrementalTrieWriterBase.complete` / `performCompletion` of the page-aware
    /// writer), then hands back the output.
    pub fn finish(mut self) -> io::Result<Finished<W>> {
        let mut root = None;
        while !self.stack.is_empty() {
            root = Some(self.complete_last()?);
        }
        let root = root.ok_or_else(|| invariant("no root".into()))?;

        let mut actual = self.recalc_total_size(root, self.pos as i64);
        let mut bytes_left = self.bytes_left_in_page();
        if actual > bytes_left {
            if actual <= MAX_BYTES_PER_PAGE {
                self.pad_to_page_boundary()?;
                bytes_left = MAX_BYTES_PER_PAGE;
                actual = self.recalc_total_size(root, self.pos as i64);
            }
            if actual > bytes_left {
                self.layout_children(root)?;
                if self.nodes[root].node_size > self.bytes_left_in_page() {
                    self.pad_to_page_boundary()?;
                    self.recalc_total_size(root, self.pos as i64);
                }
            }
        }
        let root_pos = self.write(root)?;
        Ok(Finished {
            root: root_pos as u64,
            end: self.pos,
            count: self.count,
            out: self.out,
        })
    }

    fn bytes_left_in_page(&self) -> i64 {
        (PAGE_SIZE - self.pos % PAGE_SIZE) as i64
    }

    fn pad_to_page_boundary(&mut self) -> io::Result<()> {
        let rem = self.pos % PAGE_SIZE;
        if rem != 0 {
            let pad = (PAGE_SIZE - rem) as usize;
            self.out.write_all(&vec![0u8; pad])?;
            self.pos += pad as u64;
        }
        Ok(())
    }

    /// `Node.maxPositionDelta`: the furthest (most negative) pointer the node would need
    /// if written at `node_pos`.
    fn max_position_delta(&self, n: usize, node_pos: i64) -> i64 {
        let node = &self.nodes[n];
        if !node.has_out_of_page_children {
            return -(node.branch_size - self.nodes[node.children[0]].branch_size);
        }
        let mut min_placed = 0i64;
        let mut min_unplaced = 1i64;
        for &c in &node.children {
            let child = &self.nodes[c];
            if child.file_pos != UNSET {
                min_placed = min_placed.min(child.file_pos - node_pos);
            } else if min_unplaced > 0 {
                min_unplaced = -(node.branch_size - child.branch_size);
            }
        }
        min_placed.min(min_unplaced)
    }

    fn transitions(&self, n: usize) -> Vec<u8> {
        self.nodes[n]
            .children
            .iter()
            .map(|&c| self.nodes[c].transition as u8)
            .collect()
    }

    /// `TrieNode.typeFor`.
    fn type_for(&self, n: usize, node_pos: i64) -> NodeType {
        let node = &self.nodes[n];
        let c = node.children.len();
        if c == 0 {
            return PAYLOAD_ONLY;
        }
        let delta = self.max_position_delta(n, node_pos);
        let mut i = 0;
        while !SINGLES[i].fits((-delta).max(0) as u64) {
            i += 1;
        }
        if c == 1 {
            if node.payload.is_some() && SINGLES[i].bytes_per_pointer == 0 {
                i += 1;
            }
            return SINGLES[i];
        }
        let tr = self.transitions(n);
        let (sparse, dense) = (SPARSES[i], DENSES[i]);
        if sparse.size(&tr) < dense.size(&tr) {
            sparse
        } else {
            dense
        }
    }

    /// `TrieSerializer.sizeofNode`: the node's type size plus its payload.
    fn sizeof_node(&self, n: usize, node_pos: i64) -> i64 {
        let ty = self.type_for(n, node_pos);
        let payload = self.nodes[n].payload.as_ref().map_or(0, |p| p.size());
        (ty.size(&self.transitions(n)) + payload) as i64
    }

    /// `IncrementalTrieWriterPageAware.complete`.
    fn complete(&mut self, n: usize) -> io::Result<()> {
        let branch_size: i64 = self.nodes[n]
            .children
            .iter()
            .map(|&c| self.nodes[c].branch_size + self.nodes[c].node_size)
            .sum();
        self.nodes[n].branch_size = branch_size;
        let node_size = self.sizeof_node(n, self.pos as i64);
        if node_size + branch_size < MAX_BYTES_PER_PAGE {
            let mut out_children = false;
            let mut out_branch = false;
            for &c in &self.nodes[n].children {
                let child = &self.nodes[c];
                if child.file_pos != UNSET {
                    out_children = true;
                } else if child.has_out_of_page_children || child.has_out_of_page_in_branch {
                    out_branch = true;
                }
            }
            let node = &mut self.nodes[n];
            node.node_size = node_size;
            node.has_out_of_page_children = out_children;
            node.has_out_of_page_in_branch = out_branch;
            return Ok(());
        }
        self.layout_children(n)
    }

    /// `IncrementalTrieWriterPageAware.layoutChildren`: writes the node's unplaced child
    /// branches, each time the largest that fits in what is left of the page (ties to the
    /// highest transition, as the `BRANCH_SIZE_COMPARATOR` TreeSet does), padding to a new
    /// page when none fits.
    fn layout_children(&mut self, n: usize) -> io::Result<()> {
        // The TreeSet's elements, keyed by (size at insertion, transition).
        let mut set: Vec<(i64, u16, usize)> = self.nodes[n]
            .children
            .iter()
            .filter(|&&c| self.nodes[c].file_pos == UNSET)
            .map(|&c| {
                let ch = &self.nodes[c];
                (ch.branch_size + ch.node_size, ch.transition, c)
            })
            .collect();
        let mut bytes_left = self.bytes_left_in_page();
        while !set.is_empty() {
            // headSet(cmp = (bytesLeft, 256), inclusive).pollLast()
            let pick = set
                .iter()
                .enumerate()
                .filter(|(_, e)| e.0 <= bytes_left)
                .max_by_key(|(_, e)| (e.0, e.1))
                .map(|(i, _)| i);
            let idx = match pick {
                Some(i) => i,
                None => {
                    self.pad_to_page_boundary()?;
                    bytes_left = MAX_BYTES_PER_PAGE;
                    set.iter()
                        .enumerate()
                        .max_by_key(|(_, e)| (e.0, e.1))
                        .map(|(i, _)| i)
                        .ok_or_else(|| invariant("empty child set".into()))?
                }
            };
            let (_, _, child) = set.swap_remove(idx);
            let ch = &self.nodes[child];
            if ch.has_out_of_page_children || ch.has_out_of_page_in_branch {
                let actual = self.recalc_total_size(child, self.pos as i64);
                if actual > bytes_left {
                    if bytes_left == MAX_BYTES_PER_PAGE {
                        self.layout_children(child)?;
                        bytes_left = self.bytes_left_in_page();
                    }
                    let ch = &self.nodes[child];
                    set.push((ch.branch_size + ch.node_size, ch.transition, child));
                    continue;
                }
            }
            let p = self.write(child)?;
            self.finalize_with_position(child, p);
            bytes_left = self.bytes_left_in_page();
        }
        {
            let node = &mut self.nodes[n];
            node.branch_size = 0;
            node.has_out_of_page_children = true;
            node.has_out_of_page_in_branch = false;
        }
        let node_size = self.sizeof_node(n, self.pos as i64);
        self.nodes[n].node_size = node_size;
        Ok(())
    }

    /// `Node.finalizeWithPosition`: the branch now takes no space in the current page.
    /// Its written children are no longer needed: their slots are reused.
    fn finalize_with_position(&mut self, n: usize, pos: i64) {
        let children = std::mem::take(&mut self.nodes[n].children);
        for c in children {
            self.release(c);
        }
        let node = &mut self.nodes[n];
        node.file_pos = pos;
        node.branch_size = 0;
        node.node_size = 0;
        node.has_out_of_page_in_branch = false;
        node.has_out_of_page_children = false;
        node.payload = None;
    }

    fn release(&mut self, n: usize) {
        let children = std::mem::take(&mut self.nodes[n].children);
        for c in children {
            self.release(c);
        }
        self.nodes[n].payload = None;
        self.free.push(n);
    }

    /// `recalcTotalSize`.
    fn recalc_total_size(&mut self, n: usize, node_pos: i64) -> i64 {
        if self.nodes[n].has_out_of_page_in_branch {
            let mut sz = 0;
            let children = self.nodes[n].children.clone();
            for c in children {
                sz += self.recalc_total_size(c, node_pos + sz);
            }
            self.nodes[n].branch_size = sz;
        }
        let node = &self.nodes[n];
        if node.has_out_of_page_children || node.has_out_of_page_in_branch {
            let size = self.sizeof_node(n, node_pos + node.branch_size);
            self.nodes[n].node_size = size;
        }
        let node = &self.nodes[n];
        node.branch_size + node.node_size
    }

    /// `write`: the unwritten part of the branch in post-order; returns the node's
    /// position.
    fn write(&mut self, n: usize) -> io::Result<i64> {
        let start = self.pos as i64;
        let children = self.nodes[n].children.clone();
        for c in children {
            if self.nodes[c].file_pos == UNSET {
                let p = self.write(c)?;
                self.nodes[c].file_pos = p;
            }
        }
        let node_pos = start + self.nodes[n].branch_size;
        if self.pos as i64 != node_pos {
            return Err(invariant(format!(
                "expected node position {node_pos}, at {} after writing children",
                self.pos
            )));
        }
        let ty = self.type_for(n, node_pos);
        let transitions = self.transitions(n);
        let deltas: Vec<u64> = self.nodes[n]
            .children
            .iter()
            .map(|&c| (node_pos - self.nodes[c].file_pos) as u64)
            .collect();
        if let Some(&d) = deltas.iter().find(|&&d| !ty.fits(d) || d == 0) {
            return Err(invariant(format!(
                "delta {d} does not fit node type {}",
                ty.ordinal
            )));
        }
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let bits = self.nodes[n].payload.as_ref().map_or(0, |p| p.flags());
        ty.serialize(&mut buf, &transitions, &deltas, bits);
        if let Some(p) = &self.nodes[n].payload {
            p.write(&mut buf);
        }
        if (node_pos as u64 % PAGE_SIZE) + buf.len() as u64 > PAGE_SIZE {
            return Err(invariant(format!(
                "node of {} bytes at {node_pos} would cross a page boundary",
                buf.len()
            )));
        }
        self.out.write_all(&buf)?;
        self.pos += buf.len() as u64;
        self.scratch = buf;
        Ok(node_pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks to the end: the longest path seen at a payload node, or the walk's error.
    fn deepest(mut w: Walk<'_>) -> Result<usize> {
        let mut deepest = 0;
        while let Some(v) = w.next_node()? {
            deepest = deepest.max(v.path.len());
        }
        Ok(deepest)
    }

    #[test]
    fn trie_sized_ints_match_cassandra() {
        assert_eq!(non_zero_size(0), 1);
        assert_eq!(non_zero_size(127), 1);
        assert_eq!(non_zero_size(128), 2);
        assert_eq!(non_zero_size(-1), 1);
        assert_eq!(non_zero_size(-129), 2);
        assert_eq!(non_zero_size(i64::MAX), 8);
        let mut out = Vec::new();
        write_sized(&mut out, (-200i64) as u64, 2);
        assert_eq!(read_sized_signed(&out), -200);
    }

    #[test]
    fn trie_12_bit_packing_round_trips() {
        for n in 1..6usize {
            let vals: Vec<u64> = (0..n as u64).map(|i| 0xABC - i * 0x111).collect();
            let mut out = Vec::new();
            write_12_bits(&mut out, vals.iter().copied());
            assert_eq!(out.len(), (n * 3).div_ceil(2));
            out.extend_from_slice(&[0, 0]);
            for (i, v) in vals.iter().enumerate() {
                let o = (3 * i) / 2;
                let word = ((out[o] as u16) << 8) | out[o + 1] as u16;
                let got = (if i & 1 == 0 { word >> 4 } else { word } & 0xFFF) as u64;
                assert_eq!(got, *v);
            }
        }
    }

    #[test]
    fn trie_every_node_type_decodes_what_it_encodes() {
        let file = Path::new("t");
        // Children at known offsets below the node; each type with a delta it fits.
        for ty in VALUES {
            let transitions: Vec<u8> = match ty.shape {
                Shape::PayloadOnly => vec![],
                Shape::Single | Shape::SingleNoPayload4 | Shape::SingleNoPayload12 => vec![7],
                Shape::Sparse | Shape::Sparse12 => vec![1, 9, 200],
                Shape::Dense | Shape::Dense12 => vec![3, 4, 6],
            };
            let delta_max: u64 = if ty.fits(0xFFFF) {
                300
            } else if ty.fits(0xFF) {
                200
            } else {
                9
            };
            let deltas: Vec<u64> = (0..transitions.len() as u64)
                .map(|i| delta_max - i)
                .collect();
            let node_pos = 1000u64;
            let mut buf = vec![0u8; node_pos as usize];
            let flags = if matches!(ty.shape, Shape::SingleNoPayload4 | Shape::SingleNoPayload12) {
                0
            } else {
                5
            };
            ty.serialize(&mut buf, &transitions, &deltas, flags);
            assert_eq!(
                buf.len() - node_pos as usize,
                ty.size(&transitions),
                "{ty:?}"
            );
            let end = buf.len() as u64;
            let node = read_node(file, &buf, node_pos, end).unwrap();
            assert_eq!(node.ordinal, ty.ordinal);
            assert_eq!(node.payload_flags, flags);
            assert_eq!(node.payload_pos, end);
            let want: Vec<(u8, u64)> = transitions
                .iter()
                .zip(&deltas)
                .map(|(&t, &d)| (t, node_pos - d))
                .collect();
            assert_eq!(node.children, want, "{ty:?}");
        }
    }

    #[test]
    fn trie_corrupt_nodes_are_typed_errors() {
        let file = Path::new("t");
        // Single8 at 0 pointing 5 bytes back: before the file start.
        let e = read_node(file, &[0x20, 0x41, 0x05], 0, 3).unwrap_err();
        assert_eq!(e.kind(), "corrupt");
        assert!(e.to_string().contains("child pointer"), "{e}");
        // A Sparse16 node cut by the end of the region.
        let e = read_node(file, &[0x70, 0x02, 0x01], 0, 3).unwrap_err();
        assert!(e.to_string().contains("needs"), "{e}");
        // A node straddling a page boundary.
        let mut buf = vec![0u8; 4100];
        buf[4095] = 0x20;
        let e = read_node(file, &buf, 4095, 4100).unwrap_err();
        assert!(e.to_string().contains("page boundary"), "{e}");
        // Pointer past the region.
        let e = read_node(file, &buf, 5000, 4100).unwrap_err();
        assert!(e.to_string().contains("outside the trie"), "{e}");
        // A walk over two parents sharing one child is cut off, not exponential.
        let mut buf = vec![0x08u8]; // payload-only leaf at 0
        for i in 0..40u64 {
            // Sparse8 with two transitions both pointing to the previous node.
            let pos = buf.len() as u64;
            let prev = if i == 0 { 0 } else { pos - 6 };
            buf.extend_from_slice(&[0x50, 2, 1, 2, (pos - prev) as u8, (pos - prev) as u8]);
        }
        let end = buf.len() as u64;
        let err = deepest(Walk::new(file, &buf, end - 6, 0..end, usize::MAX)).unwrap_err();
        assert!(err.to_string().contains("shared"), "{err}");
        // A chain of 40 single-child nodes over a payload leaf: walked whole when keys may
        // be 40 transitions deep, refused as corruption when they may be 10 at most.
        let mut buf = vec![0x08u8];
        for i in 0..40u64 {
            // Single-child node with an 8-bit backward offset (SINGLE_8: 0x2_ header).
            let pos = buf.len() as u64;
            let prev = if i == 0 { 0 } else { pos - 3 };
            buf.extend_from_slice(&[0x20, b'a', (pos - prev) as u8]);
        }
        let end = buf.len() as u64;
        let walk = |region, max_depth| deepest(Walk::new(file, &buf, end - 3, region, max_depth));
        assert_eq!(walk(0..end, 40).unwrap(), 40);
        let err = walk(0..end, 10).unwrap_err();
        assert!(
            err.to_string().contains("deeper than the longest key"),
            "{err}"
        );
        // A node before the walk's region (the previous Rows.db entry's trie) is refused.
        let err = walk(4..end, usize::MAX).unwrap_err();
        assert!(err.to_string().contains("before its region"), "{err}");
    }
}

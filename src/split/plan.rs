//! The split plan: pure arithmetic over the parent's index entries and chunk grid.
//!
//! Two steps, both without I/O:
//! 1. `Grouper` streams (ordinal, token, position) of every partition and groups them into
//!    **runs** of consecutive partitions that go to the same child; at the end runs become
//!    children (in anticompaction, small runs of a label merge into one `regrid` child).
//! 2. `geometry` turns a child's byte span into its chunk run, dead prefix, data length and
//!    trailing-chunk rule; `predict` says how many bytes each layout shares, copies and
//!    re-encodes.
//!
//! Memory is O(children + runs), never O(partitions).

use super::fallback::Fallback;
use super::spec::{Cut, Label, RepairedRanges};
use crate::sstable::{Partitioner, Token};

/// A run of consecutive parent partitions `[first_ordinal, last_ordinal]` occupying parent
/// uncompressed bytes `[first_position, end_position)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Run {
    pub first_ordinal: u64,
    pub last_ordinal: u64,
    pub first_position: u64,
    /// Where the run's last partition starts: with `first_position`, where its two keys are.
    pub last_position: u64,
    pub end_position: u64,
    #[serde(serialize_with = "crate::sstable::hex::serialize")]
    pub first_key: Vec<u8>,
    #[serde(serialize_with = "crate::sstable::hex::serialize")]
    pub last_key: Vec<u8>,
    pub first_token: String,
    pub last_token: String,
    /// Parent Index.db bytes `[index_start, index_end)` holding the run's entries: a
    /// builder of one child's components reads only these.
    pub index_start: u64,
    pub index_end: u64,
}

impl Run {
    pub fn partitions(&self) -> u64 {
        self.last_ordinal - self.first_ordinal + 1
    }
    pub fn bytes(&self) -> u64 {
        self.end_position - self.first_position
    }
}

/// A child before layouts: one contiguous run (zero-copy layouts), or several runs of one
/// label merged into a `regrid` child.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PlannedChild {
    pub runs: Vec<Run>,
    pub label: Option<Label>,
    /// Several runs (or a run too small to be worth its own sstable): must be `regrid`.
    pub merged: bool,
}

impl PlannedChild {
    pub fn partitions(&self) -> u64 {
        self.runs.iter().map(Run::partitions).sum()
    }
    pub fn bytes(&self) -> u64 {
        self.runs.iter().map(Run::bytes).sum()
    }
    /// The parent byte ranges `[first_position, end_position)` of its runs, in order: what
    /// a `regrid` child lays back to back.
    pub fn byte_runs(&self) -> Vec<(u64, u64)> {
        self.runs
            .iter()
            .map(|r| (r.first_position, r.end_position))
            .collect()
    }
}

/// Where a partition goes, as the grouper decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Group {
    Index(usize),
    Label(Label),
    /// Cleanup: a partition outside the owned ranges, written to no child.
    Dropped,
}

struct OpenRun {
    group: Group,
    run: Run,
}

/// Streams partitions in index order and groups them into runs.
pub struct Grouper {
    cut: Cut,
    partitioner: Partitioner,
    data_length: u64,
    /// For `Parts`: children started so far (the open one included).
    parts_made: usize,
    /// For `Parts`: the last N-1 partition starts, from which cuts the stream did not make
    /// are made at the end (the dead-prefix preference may move a cut, never drop it).
    recent: std::collections::VecDeque<Boundary>,
    /// For `Parts`: the first start past the open child's target, while the grouper waits
    /// for one with the preferred dead prefix; the cut falls back to it if none comes.
    deferred: Option<Boundary>,
    defer_now: bool,
    /// Grid unit of the parent (chunk length; 64 KiB for uncompressed): `Parts` prefers a
    /// cut whose first partition starts at least `min_dead_prefix` into its unit, because
    /// the `aligned` layout re-encodes that dead prefix to align the rest.
    grid: u64,
    min_dead_prefix: u64,
    parts_patience: u32,
    boundary_idx: usize,
    open: Option<OpenRun>,
    runs: Vec<(Group, Run)>,
    last_key: Vec<u8>,
    last_token: String,
    /// Where the last partition pushed starts.
    last_position: u64,
    ordinal: u64,
}

/// How many partitions past a `Parts` target the grouper waits for a cut with a usable
/// dead prefix before cutting anyway.
pub(super) const PARTS_PATIENCE: u32 = 64;

impl Grouper {
    pub fn new(
        cut: Cut,
        partitioner: Partitioner,
        data_length: u64,
        grid: u64,
        min_dead_prefix: u64,
    ) -> Grouper {
        Grouper {
            cut,
            partitioner,
            data_length,
            parts_made: 1,
            recent: std::collections::VecDeque::new(),
            deferred: None,
            defer_now: false,
            grid: grid.max(1),
            min_dead_prefix,
            parts_patience: 0,
            boundary_idx: 0,
            open: None,
            runs: Vec::new(),
            last_key: Vec::new(),
            last_token: String::new(),
            last_position: 0,
            ordinal: 0,
        }
    }

    fn group_of(&mut self, token: &Token, position: u64) -> Group {
        match &self.cut {
            Cut::Tokens(b) => {
                // Child i holds (b(i-1), b(i)]: advance past every boundary below the token.
                while self.boundary_idx < b.len() && b[self.boundary_idx] < *token {
                    self.boundary_idx += 1;
                }
                Group::Index(self.boundary_idx)
            }
            Cut::Parts(n) => {
                let n = *n;
                let current = self.parts_made - 1;
                let Some(start) = self.open.as_ref().map(|o| o.run.first_position) else {
                    return Group::Index(current);
                };
                if self.parts_made >= n {
                    return Group::Index(current);
                }
                // The open child's fair share of what is left: the remaining bytes spread
                // over the remaining children, so a large partition that carries us past
                // a target moves the later targets instead of swallowing their cuts.
                let remaining = (n - self.parts_made + 1) as u64;
                let target = start + self.data_length.saturating_sub(start) / remaining;
                if position < target {
                    return Group::Index(current);
                }
                let dead = position % self.grid;
                if dead >= self.min_dead_prefix || self.parts_patience >= PARTS_PATIENCE {
                    self.parts_made += 1;
                    self.parts_patience = 0;
                    self.deferred = None;
                    Group::Index(current + 1)
                } else {
                    self.defer_now = self.parts_patience == 0;
                    self.parts_patience += 1;
                    Group::Index(current)
                }
            }
            Cut::Ranges(r) => Group::Label(r.label(self.partitioner, token)),
            Cut::Owned(o) => owned_group(o, self.partitioner, token),
        }
    }

    /// Feeds the next partition in index order; `index_offset` is where its entry starts in
    /// the parent's Index.db.
    pub fn push(&mut self, key: &[u8], token: &Token, position: u64, index_offset: u64) {
        let group = self.group_of(token, position);
        let token_s = token.to_string();
        let ordinal = self.ordinal;
        self.ordinal += 1;
        if let Cut::Parts(n) = &self.cut {
            if ordinal > 0 && *n > 1 {
                if self.recent.len() == n - 1 {
                    self.recent.pop_front();
                }
                let b = Boundary {
                    ordinal,
                    position,
                    index_offset,
                    key: key.to_vec(),
                    token: token_s.clone(),
                    prev_key: self.last_key.clone(),
                    prev_token: self.last_token.clone(),
                    prev_position: self.last_position,
                };
                if std::mem::take(&mut self.defer_now) {
                    self.deferred = Some(b.clone());
                }
                self.recent.push_back(b);
            }
        }
        match &mut self.open {
            Some(o) if o.group == group => {}
            _ => {
                if let Some(mut o) = self.open.take() {
                    o.run.end_position = position;
                    o.run.index_end = index_offset;
                    o.run.last_key = std::mem::take(&mut self.last_key);
                    o.run.last_token = std::mem::take(&mut self.last_token);
                    o.run.last_position = self.last_position;
                    o.run.last_ordinal = ordinal - 1;
                    self.runs.push((o.group, o.run));
                }
                self.open = Some(OpenRun {
                    group,
                    run: Run {
                        first_ordinal: ordinal,
                        last_ordinal: ordinal,
                        first_position: position,
                        last_position: position,
                        end_position: position,
                        first_key: key.to_vec(),
                        last_key: Vec::new(),
                        first_token: token_s.clone(),
                        last_token: String::new(),
                        index_start: index_offset,
                        index_end: index_offset,
                    },
                });
            }
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.last_token = token_s;
        self.last_position = position;
    }

    /// Closes the last run; returns children in parent order, merged children last.
    /// `merge_below` is the size (in grid units) under which an anticompaction run joins its
    /// label's `regrid` child.
    /// `index_length` is the parent's Index.db length (where the last run's entries end).
    pub fn finish(mut self, merge_below_units: u64, index_length: u64) -> Vec<PlannedChild> {
        if let Some(mut o) = self.open.take() {
            o.run.end_position = self.data_length;
            o.run.index_end = index_length;
            o.run.last_key = std::mem::take(&mut self.last_key);
            o.run.last_token = std::mem::take(&mut self.last_token);
            o.run.last_position = self.last_position;
            o.run.last_ordinal = self.ordinal - 1;
            self.runs.push((o.group, o.run));
        }
        assemble(
            &self.cut,
            self.runs,
            self.deferred,
            self.recent,
            self.ordinal,
            merge_below_units,
            self.grid,
        )
    }
}

/// Cleanup's grouping: owned partitions are one label (so small owned runs merge into one
/// `regrid` child, as anticompaction merges a label's), the others are dropped.
pub(super) fn owned_group(o: &super::spec::OwnedRanges, p: Partitioner, t: &Token) -> Group {
    if o.contains(p, t) {
        Group::Label(Label::Full)
    } else {
        Group::Dropped
    }
}

/// Runs (closed, in parent order) to children: for `Parts`, the cut that waited for a dead
/// prefix in vain and the cuts the scan could not make are made first (from `deferred` and
/// `recent`, the last N-1 partition starts); then anticompaction runs touching fewer than
/// `merge_below_units` grid units join their label's `regrid` child. Shared by the streaming
/// `Grouper` and the sampled planner (`split::sampled`), so both apply the same rules.
pub(super) fn assemble(
    cut: &Cut,
    mut runs: Vec<(Group, Run)>,
    deferred: Option<Boundary>,
    mut recent: std::collections::VecDeque<Boundary>,
    partitions: u64,
    merge_below_units: u64,
    grid: u64,
) -> Vec<PlannedChild> {
    if let Cut::Parts(n) = cut {
        let want = (*n as u64).min(partitions) as usize;
        // The cut that waited for a dead prefix in vain is made where it was due.
        if let Some(b) = deferred {
            if runs.len() < want {
                recent.retain(|r| r.ordinal != b.ordinal);
                cut_at(&mut runs, b);
            }
        }
        make_missing_cuts(&mut runs, &mut recent, want);
    }
    let mut children = Vec::new();
    let mut merged: Vec<PlannedChild> = Vec::new();
    for (group, run) in runs {
        match group {
            Group::Dropped => {}
            Group::Index(_) => children.push(PlannedChild {
                runs: vec![run],
                label: None,
                merged: false,
            }),
            Group::Label(label) => {
                let units = units_touched(run.first_position, run.end_position, grid);
                if units < merge_below_units {
                    match merged.iter_mut().find(|c| c.label == Some(label)) {
                        Some(c) => c.runs.push(run),
                        None => merged.push(PlannedChild {
                            runs: vec![run],
                            label: Some(label),
                            merged: true,
                        }),
                    }
                } else {
                    children.push(PlannedChild {
                        runs: vec![run],
                        label: Some(label),
                        merged: false,
                    });
                }
            }
        }
    }
    merged.sort_by_key(|c| c.label);
    children.extend(merged);
    if matches!(cut, Cut::Owned(_)) {
        // Cleanup's children carry no label: they keep the parent's repair metadata.
        for c in &mut children {
            c.label = None;
        }
    }
    children
}

/// A partition start the `Parts` grouper may still cut at after the stream ended.
#[derive(Debug, Clone)]
pub(super) struct Boundary {
    pub(super) ordinal: u64,
    pub(super) position: u64,
    pub(super) index_offset: u64,
    pub(super) key: Vec<u8>,
    pub(super) token: String,
    pub(super) prev_key: Vec<u8>,
    pub(super) prev_token: String,
    pub(super) prev_position: u64,
}

/// `--parts N` gives exactly min(N, partitions) children: when the stream made fewer cuts
/// (the last partitions are large, or all sit in one chunk and none has the preferred dead
/// prefix), the missing cuts are made at the latest partition starts, each where it best
/// evens the bytes of the run it splits. The last N-1 starts always hold enough candidates:
/// at most (runs - 1) of them already start a run.
fn make_missing_cuts(
    runs: &mut Vec<(Group, Run)>,
    recent: &mut std::collections::VecDeque<Boundary>,
    want: usize,
) {
    while runs.len() < want {
        // The candidate whose cut leaves the smaller of its two halves largest.
        let mut best: Option<(usize, usize, u64)> = None;
        for (bi, b) in recent.iter().enumerate() {
            let Some(ri) = runs
                .iter()
                .position(|(_, r)| r.first_ordinal < b.ordinal && b.ordinal <= r.last_ordinal)
            else {
                continue;
            };
            let r = &runs[ri].1;
            let smaller = (b.position - r.first_position).min(r.end_position - b.position);
            if best.is_none_or(|(_, _, s)| smaller > s) {
                best = Some((bi, ri, smaller));
            }
        }
        let Some((bi, _, _)) = best else { return };
        let Some(b) = recent.remove(bi) else { return };
        cut_at(runs, b);
    }
}

/// Splits the run holding partition `b.ordinal` so that a new run starts there.
fn cut_at(runs: &mut Vec<(Group, Run)>, b: Boundary) {
    let Some(ri) = runs
        .iter()
        .position(|(_, r)| r.first_ordinal < b.ordinal && b.ordinal <= r.last_ordinal)
    else {
        return;
    };
    {
        let (group, left) = &mut runs[ri];
        let group = *group;
        let right = Run {
            first_ordinal: b.ordinal,
            last_ordinal: left.last_ordinal,
            first_position: b.position,
            last_position: left.last_position,
            end_position: left.end_position,
            first_key: b.key,
            last_key: std::mem::replace(&mut left.last_key, b.prev_key),
            first_token: b.token,
            last_token: std::mem::replace(&mut left.last_token, b.prev_token),
            index_start: b.index_offset,
            index_end: left.index_end,
        };
        left.last_ordinal = b.ordinal - 1;
        left.last_position = b.prev_position;
        left.end_position = b.position;
        left.index_end = b.index_offset;
        runs.insert(ri + 1, (group, right));
    }
}

/// Grid units (chunks) that bytes `[first, end)` touch.
pub fn units_touched(first: u64, end: u64, grid: u64) -> u64 {
    if end <= first {
        return 0;
    }
    (end - 1) / grid - first / grid + 1
}

/// A zero-copy child's place in the parent's chunk grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    /// Parent uncompressed offset that becomes the child's position 0: the start of the
    /// chunk holding the first partition (compressed), or of its 64 KiB CRC block
    /// (uncompressed) so that CRC.db's grid carries over.
    pub base: u64,
    /// Parent chunk run `first_chunk..=last_chunk` (compressed parents).
    pub first_chunk: u64,
    pub last_chunk: u64,
    /// Bytes before the first partition in the child's first chunk, zero-filled.
    pub dead_prefix: u64,
    /// The child's `dataLength`: the end of its last partition, relative to `base`.
    pub data_length: u64,
    /// `dataLength % chunkLength == 0`: one extra chunk so that seeking to `dataLength`
    /// finds a chunk (`RandomAccessReader` → `chunkFor`; sstable-format.md §4.5).
    pub extra_chunk: bool,
    /// Bytes of a lead chunk of zeros before the first chunk (0 or one chunk length): its
    /// LZ4 encoding is the knob that aligns the interior when the dead prefix is too short
    /// to be one (incompressible data). Child positions are `parent position - base + lead`;
    /// `data_length` includes it.
    pub lead: u64,
}

/// Geometry of bytes `[first_position, end_position)` on a grid of `unit` bytes.
pub fn geometry(first_position: u64, end_position: u64, unit: u64) -> Geometry {
    let first_chunk = first_position / unit;
    let last_chunk = (end_position - 1) / unit;
    let base = first_chunk * unit;
    let data_length = end_position - base;
    Geometry {
        base,
        first_chunk,
        last_chunk,
        dead_prefix: first_position - base,
        data_length,
        extra_chunk: data_length.is_multiple_of(unit),
        lead: 0,
    }
}

/// Whether an `aligned` child needs a lead chunk of zeros: its dead prefix alone is shorter
/// than the block plus the encoder's slack, so on incompressible data no encoding of its
/// first chunk may reach the residue the interior needs. Not when the dead prefix is 0 and
/// the first chunk already sits on a block boundary in the parent (chunk 0 always does):
/// that chunk is then carried verbatim, at a congruent offset.
pub fn needs_lead(g: &Geometry, first_chunk_offset: u64, block: u64) -> bool {
    block > 0
        && g.last_chunk >= g.first_chunk + 2
        && g.dead_prefix < preferred_dead_prefix(block)
        && !(g.dead_prefix == 0 && first_chunk_offset.is_multiple_of(block))
}

/// How a child's Data.db is made (design-notes.md "Layouts"). Reports name it in
/// lowercase, as `--layout` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// First chunk re-encoded so the interior clones at matching block offsets; first
    /// chunk at offset 0. Safe on every stock reader.
    Aligned,
    /// CEP-66 head pad: offsets[0] = source offset mod 64 KiB. Only for non-mmap readers.
    Padded,
    /// Interior chunks copied.
    Copy,
    /// Partitions repacked into a fresh chunk grid: no dead prefix, every chunk re-encoded.
    Regrid,
}

/// The layout a split asks for (`cleave split --layout`, `spec.layout` of both kinds):
/// one layout for every child, or `Auto` (`aligned`, falling back per child). The CRD's
/// names, PascalCase as Kubernetes enums are; the CLI spells them in lowercase.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub enum LayoutRequest {
    #[default]
    Auto,
    Aligned,
    Padded,
    Copy,
    Regrid,
}

impl LayoutRequest {
    /// `Policy::layout`: `None` for `Auto`.
    pub fn layout(self) -> Option<Layout> {
        match self {
            LayoutRequest::Auto => None,
            LayoutRequest::Aligned => Some(Layout::Aligned),
            LayoutRequest::Padded => Some(Layout::Padded),
            LayoutRequest::Copy => Some(Layout::Copy),
            LayoutRequest::Regrid => Some(Layout::Regrid),
        }
    }
}

/// Bytes a layout is expected to share, copy and re-encode for a child.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Prediction {
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
}

/// Chunk offsets as the pure planner reads them: by chunk index, `None` past the last
/// chunk. A slice in tests; `FetchedOffsets` (the few a plan needs) for a real parent,
/// whose offsets may be on disk (`sstable::compression::ChunkOffsets`).
pub trait OffsetLookup {
    fn offset(&self, chunk: u64) -> Option<u64>;
}

impl OffsetLookup for [u64] {
    fn offset(&self, chunk: u64) -> Option<u64> {
        self.get(chunk as usize).copied()
    }
}

impl OffsetLookup for Vec<u64> {
    fn offset(&self, chunk: u64) -> Option<u64> {
        self.as_slice().offset(chunk)
    }
}

/// The offsets `resolve` reads, fetched before it: chunks `k`, `k+1`, `j`, `j+1` of each
/// zero-copy child's run `k..=j` (first chunk, interior start, last chunk, end).
#[derive(Debug, Default)]
pub struct FetchedOffsets {
    pub count: u64,
    pub offsets: std::collections::BTreeMap<u64, u64>,
}

impl OffsetLookup for FetchedOffsets {
    fn offset(&self, chunk: u64) -> Option<u64> {
        if chunk >= self.count {
            return None;
        }
        let o = self.offsets.get(&chunk).copied();
        debug_assert!(o.is_some(), "chunk {chunk} offset not fetched for the plan");
        o
    }
}

/// The chunks whose offsets `resolve` reads for `children` on a grid of `unit`.
pub fn offsets_needed(children: &[PlannedChild], unit: u64) -> Vec<u64> {
    let mut v: Vec<u64> = children
        .iter()
        .filter(|c| !c.merged)
        .flat_map(|c| {
            let r = &c.runs[0];
            let g = geometry(
                r.first_position,
                r.end_position.max(r.first_position + 1),
                unit,
            );
            [
                g.first_chunk,
                g.first_chunk + 1,
                g.last_chunk,
                g.last_chunk + 1,
            ]
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Parent file bytes of chunks `[from, to]` including CRCs.
pub fn chunk_bytes(offsets: &dyn OffsetLookup, file_size: u64, from: u64, to: u64) -> u64 {
    if from > to {
        return 0;
    }
    let start = offsets.offset(from).unwrap_or(file_size);
    let end = offsets.offset(to + 1).unwrap_or(file_size);
    end.saturating_sub(start)
}

/// Predicted bytes for a compressed child (estimates for re-encoded chunks: their source
/// sizes). `block` is the reflink alignment unit, 0 when the target cannot share extents.
pub fn predict_compressed(
    layout: Layout,
    g: &Geometry,
    offsets: &dyn OffsetLookup,
    file_size: u64,
    block: u64,
) -> Prediction {
    let ends = chunk_bytes(offsets, file_size, g.first_chunk, g.first_chunk)
        + if g.last_chunk > g.first_chunk {
            chunk_bytes(offsets, file_size, g.last_chunk, g.last_chunk)
        } else {
            0
        };
    let interior_from = g.first_chunk + 1;
    let interior_to = g.last_chunk.saturating_sub(1);
    let interior = if g.last_chunk > g.first_chunk + 1 {
        chunk_bytes(offsets, file_size, interior_from, interior_to)
    } else {
        0
    };
    match layout {
        Layout::Regrid => Prediction {
            bytes_reencoded: chunk_bytes(offsets, file_size, g.first_chunk, g.last_chunk),
            ..Default::default()
        },
        Layout::Copy => Prediction {
            bytes_shared: 0,
            bytes_copied: interior,
            bytes_reencoded: ends,
        },
        Layout::Aligned | Layout::Padded => {
            if block == 0 || interior == 0 {
                return Prediction {
                    bytes_shared: 0,
                    bytes_copied: interior,
                    bytes_reencoded: ends,
                };
            }
            // Whole blocks of the interior are shared; the partial blocks at both ends are
            // written.
            let start = offsets.offset(interior_from).unwrap_or(file_size);
            let end = start + interior;
            let shared = (end / block * block).saturating_sub(start.div_ceil(block) * block);
            Prediction {
                bytes_shared: shared,
                bytes_copied: interior - shared,
                bytes_reencoded: ends,
            }
        }
    }
}

/// The resolved decisions for one child, printed by `--dry-run`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChildPlan {
    pub child: PlannedChild,
    pub layout: Layout,
    /// Zero-copy layouts only.
    pub geometry: Option<Geometry>,
    pub predicted: Prediction,
    /// Why the child does not get the requested layout, if it does not (as planned; the
    /// writer may add one, e.g. when no aligned encoding exists).
    pub fallback: Option<Fallback>,
    pub label: Option<Label>,
    /// What the child holds before its first partition (`split::head`).
    pub head: super::head::Head,
}

/// Whether children get a Digest.crc32, and how it is computed (`--digest`, `spec.digest`:
/// the CRD's PascalCase names; the CLI spells them in lowercase).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub enum DigestPolicy {
    /// No Digest.crc32 (TOC omits it): fastest; `nodetool verify` then takes the extended
    /// path, which rejects a dead prefix.
    #[default]
    Off,
    /// CRC32 of the child file derived from the chunk CRC trailers (reads 4 bytes a chunk).
    Combine,
    /// CRC32 of the child file read back in full.
    Full,
}

/// How children are made, whatever the cut.
#[derive(Debug, Clone)]
pub struct Policy {
    /// `None` = auto: `aligned`, falling back per child.
    pub layout: Option<Layout>,
    /// `--target-data-access standard`: readers never mmap Data.db, so `padded` is allowed.
    pub allow_padded: bool,
    pub digest: DigestPolicy,
    /// Anticompaction runs touching fewer chunks than this merge into one `regrid` child per label.
    pub merge_below_chunks: u64,
    /// `maxBytesPerSecond`: taken for copied, re-encoded and regrid bytes, never for
    /// reflinked extents.
    pub throttle: Option<std::sync::Arc<crate::io::throttle::TokenBucket>>,
    /// The Cassandra that will read the children (`--target-cassandra`): from 5.0.5 (and
    /// when unknown) no child may start with a dead prefix (`split::head`).
    pub target: crate::sstable::cassandra::TargetCassandra,
    /// How a BTI split learns its partitions' keys (`--bti-keys`).
    pub bti_keys: BtiKeys,
}

/// How a BTI split learns its partitions' keys (`--bti-keys`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BtiKeys {
    /// From Partitions.db's prefixes, reading Data.db only at the cuts; children get the
    /// parent's Filter.db (`split::trie_only`).
    #[default]
    Trie,
    /// Every key from Data.db, as Cassandra's scanner reads them; each child gets its own
    /// Filter.db.
    Data,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            layout: None,
            allow_padded: false,
            digest: DigestPolicy::Off,
            merge_below_chunks: 8,
            throttle: None,
            target: Default::default(),
            bti_keys: BtiKeys::Trie,
        }
    }
}

/// The parent's facts a plan is resolved against.
#[derive(Debug, Clone, Copy)]
pub struct Grid {
    /// Chunk length, or the CRC.db block (64 KiB) of an uncompressed parent.
    pub unit: u64,
    /// Reflink block (0: the target cannot share extents).
    pub block: u64,
    /// Why it cannot, when it cannot.
    pub no_share: Option<crate::io::reflink::CloneRefusal>,
    /// The parent's chunks are LZ4 (the only codec whose encodings cleave tunes).
    pub lz4: bool,
}

/// Decides each child's layout, geometry and predicted bytes: pure.
pub fn resolve(
    children: Vec<PlannedChild>,
    policy: &Policy,
    grid: Grid,
    compression: Option<(&dyn OffsetLookup, u64)>,
) -> Vec<ChildPlan> {
    let Grid {
        unit,
        block,
        no_share,
        lz4,
    } = grid;
    children
        .into_iter()
        .map(|c| {
            let mut fallback = None;
            let layout = if c.merged {
                Layout::Regrid
            } else {
                let want = policy.layout.unwrap_or(Layout::Aligned);
                if want == Layout::Padded && !policy.allow_padded {
                    fallback = Some(Fallback::PaddedNotAllowed);
                    Layout::Aligned
                } else {
                    want
                }
            };
            let geometry = (layout != Layout::Regrid).then(|| {
                let r = &c.runs[0];
                let mut g = geometry(r.first_position, r.end_position, unit);
                if let (Layout::Aligned, true, Some((offsets, _))) = (layout, lz4, compression) {
                    let s0 = offsets.offset(g.first_chunk).unwrap_or(0);
                    if needs_lead(&g, s0, block) {
                        g.lead = unit;
                        g.data_length += unit;
                        g.extra_chunk = g.data_length.is_multiple_of(unit);
                    }
                }
                g
            });
            let predicted = match (compression, geometry) {
                (Some((offsets, file_size)), Some(g)) => {
                    predict_compressed(layout, &g, offsets, file_size, block)
                }
                (None, Some(g)) => {
                    let rest = g.data_length.saturating_sub(unit);
                    let shared = if block > 0 && layout != Layout::Copy {
                        rest / block * block
                    } else {
                        0
                    };
                    Prediction {
                        bytes_shared: shared,
                        bytes_copied: rest - shared,
                        bytes_reencoded: g.data_length.min(unit),
                    }
                }
                (_, None) => Prediction {
                    bytes_reencoded: c.bytes(),
                    ..Default::default()
                },
            };
            if block == 0
                && matches!(layout, Layout::Aligned | Layout::Padded)
                && fallback.is_none()
            {
                fallback = no_share.map(Fallback::NoShare);
            }
            let label = c.label;
            ChildPlan {
                child: c,
                layout,
                geometry,
                predicted,
                fallback,
                label,
                head: Default::default(),
            }
        })
        .collect()
}

/// A split decided and not started: which partitions go to which child, each child's
/// layout, geometry and predicted bytes, and the parent's key fingerprint the children must
/// add up to. `--dry-run` prints it; `write` carries it out; a stream sender sends its
/// children (`Plan::data_layout`, `Plan::components`) without writing them.
pub struct Plan {
    pub parent: super::parent::Parent,
    pub cut: Cut,
    pub policy: Policy,
    pub grid: Grid,
    pub children: Vec<ChildPlan>,
    /// The parent's partitions (exact, whichever the source).
    pub partitions: u64,
    /// (count, xor, sum) of the parent's keys' Murmur3 when the plan read every key (the
    /// full pass); a sampled plan leaves it to the write pass, which reads them all.
    pub fingerprint: Option<crate::sstable::fingerprint::Fingerprint>,
    pub source: PlanSource,
    /// Wall time of planning (docs/benchmarks.md compares it with the write pass).
    pub index_pass: std::time::Duration,
}

/// What a plan was made from. Both give the same children; only `IndexPass` reads every
/// key (and so knows the parent's key fingerprint before writing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanSource {
    /// Summary.db's samples plus point reads of Index.db at the cuts (`split::sampled`).
    SummarySamples,
    /// One streaming pass over Index.db (`Grouper`).
    IndexPass,
    /// One pass over a BTI Partitions.db, keys read only at the cuts (`split::trie_only`):
    /// the write pass and the check read no key either.
    PartitionsTrie,
}

impl Plan {
    pub fn partitions(&self) -> u64 {
        self.partitions
    }
}

/// Picks the dead-prefix threshold for `Parts` cuts: a dead prefix of at least one block
/// plus a little lets `aligned` reach any residue with the zero run alone.
pub fn preferred_dead_prefix(block: u64) -> u64 {
    block + 64
}

/// The repair triple given to a child: its label's under anticompaction, otherwise the
/// parent's.
pub fn label_of(c: &PlannedChild) -> Option<Label> {
    c.label
}

/// Convenience for callers that need the ranges' validation with the partitioner.
pub fn validate_ranges(r: &RepairedRanges, p: Partitioner) -> Result<(), String> {
    r.validate(p)
}

#[cfg(test)]
mod tests {
    use super::super::spec::RepairSession;
    use super::*;
    use crate::sstable::TokenRange;

    fn feed(g: &mut Grouper, items: &[(i64, u64)]) {
        for (i, (t, pos)) in items.iter().enumerate() {
            g.push(&[i as u8], &Token::Murmur3(*t), *pos, i as u64 * 10);
        }
    }

    #[test]
    fn token_cuts_follow_left_open_ranges() {
        let mut g = Grouper::new(
            Cut::Tokens(vec![Token::Murmur3(10), Token::Murmur3(20)]),
            Partitioner::Murmur3,
            1000,
            100,
            0,
        );
        feed(
            &mut g,
            &[(1, 0), (10, 100), (11, 200), (20, 300), (21, 400)],
        );
        let c = g.finish(0, 1_000_000);
        let spans: Vec<(u64, u64)> = c
            .iter()
            .map(|c| (c.runs[0].first_ordinal, c.runs[0].last_ordinal))
            .collect();
        assert_eq!(
            spans,
            vec![(0, 1), (2, 3), (4, 4)],
            "10 is in (MIN,10], 20 in (10,20]"
        );
        assert_eq!(c[2].runs[0].end_position, 1000);
        assert_eq!(c[0].runs[0].end_position, 200);
    }

    #[test]
    fn empty_children_are_not_created() {
        let mut g = Grouper::new(
            Cut::Tokens(vec![Token::Murmur3(-50), Token::Murmur3(10)]),
            Partitioner::Murmur3,
            100,
            10,
            0,
        );
        feed(&mut g, &[(1, 0), (2, 50)]);
        assert_eq!(g.finish(0, 1_000_000).len(), 1);
    }

    #[test]
    fn parts_cut_near_equal_bytes_and_prefer_dead_prefix() {
        // 100 partitions of 1000 bytes, grid 4096, prefer dead prefix >= 512.
        let mut g = Grouper::new(Cut::Parts(4), Partitioner::Murmur3, 100_000, 4096, 512);
        let items: Vec<(i64, u64)> = (0..100).map(|i| (i as i64, i as u64 * 1000)).collect();
        feed(&mut g, &items);
        let c = g.finish(0, 1_000_000);
        assert_eq!(c.len(), 4);
        for child in &c[1..] {
            let p = child.runs[0].first_position;
            assert!(p % 4096 >= 512, "cut at {p} has dead prefix {}", p % 4096);
        }
        let total: u64 = c.iter().map(|c| c.partitions()).sum();
        assert_eq!(total, 100);
        for child in &c {
            assert!(
                (15_000..=35_000).contains(&child.bytes()),
                "{}",
                child.bytes()
            );
        }
    }

    /// Children of `--parts n` over partitions at `positions` (data length `len`).
    fn parts(n: usize, positions: &[u64], len: u64, grid: u64, min_dead: u64) -> Vec<PlannedChild> {
        let mut g = Grouper::new(Cut::Parts(n), Partitioner::Murmur3, len, grid, min_dead);
        let items: Vec<(i64, u64)> = positions
            .iter()
            .enumerate()
            .map(|(i, p)| (i as i64, *p))
            .collect();
        feed(&mut g, &items);
        let c = g.finish(0, 1_000_000);
        // Whatever the cuts, the children tile the parent in order.
        let mut next = 0;
        for child in &c {
            let r = &child.runs[0];
            assert_eq!(r.first_ordinal, next, "{c:?}");
            next = r.last_ordinal + 1;
            assert!(r.first_position < r.end_position);
            assert_eq!(
                r.index_start,
                r.first_ordinal * 10,
                "index offsets follow the cut"
            );
        }
        assert_eq!(next, positions.len() as u64);
        assert_eq!(c.last().map(|c| c.runs[0].end_position), Some(len));
        // The sampled planner cuts at the same partitions.
        let items: Vec<(Token, u64)> = positions
            .iter()
            .enumerate()
            .map(|(i, p)| (Token::Murmur3(i as i64), *p))
            .collect();
        let s = crate::split::sampled::tests::same_as_grouper(
            &Cut::Parts(n),
            &items,
            len,
            grid,
            min_dead,
            0,
        );
        assert_eq!(
            s.iter()
                .map(|c| c.runs[0].first_ordinal)
                .collect::<Vec<_>>(),
            c.iter()
                .map(|c| c.runs[0].first_ordinal)
                .collect::<Vec<_>>()
        );
        c
    }

    #[test]
    fn parts_give_min_n_partitions_children() {
        // Two partitions, the second far larger: still two children.
        assert_eq!(parts(2, &[0, 10], 1010, 16384, 4160).len(), 2);
        // Fewer partitions than parts: one child each.
        assert_eq!(parts(8, &[0, 10, 20], 30, 16384, 4160).len(), 3);
        // Every N from 2 to 12 over 12 partitions of equal size.
        let pos: Vec<u64> = (0..12).map(|i| i * 100).collect();
        for n in 2..=12 {
            assert_eq!(parts(n, &pos, 1200, 16384, 4160).len(), n, "n = {n}");
        }
    }

    #[test]
    fn one_chunk_tables_are_cut_too() {
        // 5 partitions inside one 16 KiB chunk: no start has the preferred dead prefix
        // (>= 4160), and there are fewer than PARTS_PATIENCE partitions after any target.
        let c = parts(3, &[0, 1000, 2000, 3000, 4000], 5000, 16384, 4160);
        assert_eq!(c.len(), 3);
        let sizes: Vec<u64> = c.iter().map(|c| c.bytes()).collect();
        assert!(sizes.iter().all(|b| *b >= 1000 && *b <= 2000), "{sizes:?}");
    }

    #[test]
    fn a_large_partition_moves_later_cuts_instead_of_eating_them() {
        // A 6000-byte partition spans the first two targets of --parts 4 (2500, 5000):
        // the remaining bytes are shared by the remaining children.
        let mut pos = vec![0, 100, 6100];
        pos.extend((1..=39).map(|i| 6100 + i * 100));
        let c = parts(4, &pos, 10_000, 1 << 30, 0);
        assert_eq!(c.len(), 4);
        let sizes: Vec<u64> = c.iter().map(|c| c.bytes()).collect();
        assert_eq!(sizes[0], 6100, "{sizes:?}");
        assert!(
            sizes[1..].iter().all(|b| (1100..=1400).contains(b)),
            "{sizes:?}"
        );
    }

    #[test]
    fn dead_prefix_preference_moves_a_cut_never_drops_it() {
        // 200 partitions of 100 bytes on a 4096-byte grid, preferring >= 1000 bytes of
        // dead prefix: each cut waits for such a start (within PARTS_PATIENCE partitions).
        let pos: Vec<u64> = (0..200).map(|i| i * 100).collect();
        let c = parts(4, &pos, 20_000, 4096, 1000);
        assert_eq!(c.len(), 4);
        for child in &c[1..] {
            let p = child.runs[0].first_position;
            assert!(p % 4096 >= 1000, "cut at {p}");
        }
        // A preference nothing satisfies (larger than the grid): the cuts still happen,
        // after PARTS_PATIENCE partitions or at the end.
        let c = parts(4, &pos, 20_000, 4096, 5000);
        assert_eq!(c.len(), 4);
    }

    #[test]
    fn vnode_ranges_merge_small_runs_per_label() {
        let p = Partitioner::Murmur3;
        // Full ranges: every other block of 10 tokens.
        let full: Vec<TokenRange> = (0..50)
            .map(|i| TokenRange::new(Token::Murmur3(i * 20), Token::Murmur3(i * 20 + 10)))
            .collect();
        let r = RepairedRanges {
            full,
            transient: vec![],
            session: RepairSession::RepairedAt(1),
        };
        let mut g = Grouper::new(Cut::Ranges(r), p, 1_000_000, 1000, 0);
        // 1000 partitions of 1000 bytes, tokens 0..1000: runs of 10 alternate labels.
        let items: Vec<(i64, u64)> = (0..1000).map(|i| (i as i64 + 1, i as u64 * 1000)).collect();
        feed(&mut g, &items);
        // Runs are 10 units; merge below 8 units: all runs are their own child.
        let c = Grouper::finish_clone_for_test(&items, 8);
        assert!(c.len() > 90);
        // Merge below 20 units: two merged children (full, unrepaired).
        let c = g.finish(20, 1_000_000);
        assert_eq!(c.len(), 2);
        assert!(c.iter().all(|c| c.merged));
        assert_eq!(c.iter().map(|c| c.partitions()).sum::<u64>(), 1000);
    }

    impl Grouper {
        fn finish_clone_for_test(items: &[(i64, u64)], merge: u64) -> Vec<PlannedChild> {
            let full: Vec<TokenRange> = (0..50)
                .map(|i| TokenRange::new(Token::Murmur3(i * 20), Token::Murmur3(i * 20 + 10)))
                .collect();
            let r = RepairedRanges {
                full,
                transient: vec![],
                session: RepairSession::RepairedAt(1),
            };
            let mut g = Grouper::new(Cut::Ranges(r), Partitioner::Murmur3, 1_000_000, 1000, 0);
            feed(&mut g, items);
            g.finish(merge, 1_000_000)
        }
    }

    #[test]
    fn geometry_rules() {
        let g = geometry(70_000, 100_000, 65_536);
        assert_eq!(g.base, 65_536);
        assert_eq!(g.dead_prefix, 70_000 - 65_536);
        assert_eq!(g.data_length, 100_000 - 65_536);
        assert_eq!((g.first_chunk, g.last_chunk), (1, 1));
        assert!(!g.extra_chunk);
        let g = geometry(65_536, 131_072, 65_536);
        assert_eq!((g.first_chunk, g.last_chunk, g.dead_prefix), (1, 1, 0));
        assert!(g.extra_chunk, "ends exactly on a chunk boundary");
    }

    #[test]
    fn aligned_shares_whole_interior_blocks() {
        let offsets = vec![0, 5000, 10_000, 15_000, 20_000];
        let g = geometry(100, 5 * 16384 - 1, 16384);
        let p = predict_compressed(Layout::Aligned, &g, &offsets, 25_000, 4096);
        // Interior chunks 1..=3: bytes [5000, 20000): whole blocks [8192, 16384) shared.
        assert_eq!(p.bytes_shared, 8192);
        assert_eq!(p.bytes_copied, 15_000 - 8192);
        assert_eq!(p.bytes_reencoded, 5000 + 5000);
        let c = predict_compressed(Layout::Copy, &g, &offsets, 25_000, 4096);
        assert_eq!((c.bytes_shared, c.bytes_copied), (0, 15_000));
    }
}

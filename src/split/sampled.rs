//! The split plan from Summary.db's samples plus point reads of Index.db, so that a split
//! reads the parent's Index.db once (in `Plan::write`) instead of twice.
//!
//! Summary.db at full sampling (`samplingLevel` 128) holds every `minIndexInterval`-th key
//! of Index.db with its offset (`IndexSummaryBuilder.maybeAddEntry` samples partition `i`
//! when `i` reaches the next sample position, `minIndexInterval` apart at full sampling):
//! sample `j` is partition `j · interval`, so the ordinal of every entry read from a sample
//! is known. A cut is then found without the full pass: the last sample before it (by
//! token, or by Data.db position for `--parts`, each position one point read), then at most
//! one interval of entries (plus `PARTS_PATIENCE` for the dead-prefix preference). The tail
//! of Index.db (from the last sample) gives the partition count and the last key.
//!
//! The rules are the streaming `Grouper`'s, decided on the same entries: the children are
//! equal to the full pass's (unit tests compare both on the same entries; the corpus test
//! compares them on every real sstable), and `plan::assemble` finishes both. The
//! assumption (regular samples) is checked on every entry read here, and `Plan::write`
//! checks the start of every run and the count again in its single pass.

use std::collections::VecDeque;

use super::plan::{assemble, Boundary, Group, PlannedChild, Run, PARTS_PATIENCE};
use super::spec::Cut;
use crate::sstable::{FormatError, Partitioner, Token};

/// One Index.db entry as the sampled planner sees it.
#[derive(Debug, Clone)]
pub struct ProbeEntry {
    pub ordinal: u64,
    pub key: Vec<u8>,
    pub token: Token,
    pub position: u64,
    pub index_offset: u64,
}

/// Why a sampled plan could not be made: the index could not be read, or the samples are
/// not what full sampling writes (then the caller plans with the full pass instead).
#[derive(Debug)]
pub enum ProbeError {
    Index(FormatError),
    Irregular(String),
}

impl From<FormatError> for ProbeError {
    fn from(e: FormatError) -> ProbeError {
        ProbeError::Index(e)
    }
}

/// What the sampled planner reads: Summary.db's samples (in memory) and Index.db entries
/// from a sample on (point reads). Implemented over the files (`probe::FileProbe`) and,
/// in tests, over a vector of entries.
pub trait IndexProbe {
    /// Partitions from one sample to the next.
    fn interval(&self) -> u64;
    /// Number of samples (at least 1: sample 0 is partition 0).
    fn samples(&self) -> usize;
    /// Token of sample `j`'s key.
    fn sample_token(&self, j: usize) -> &Token;
    /// Data.db position of sample `j`'s partition (a point read of its entry).
    fn sample_position(&mut self, j: usize) -> Result<u64, ProbeError>;
    /// Moves the cursor to sample `j`: `next` then returns partition `j · interval`.
    fn seek(&mut self, j: usize) -> Result<(), ProbeError>;
    /// The next entry, `None` at the end of Index.db.
    fn next(&mut self) -> Result<Option<ProbeEntry>, ProbeError>;
}

/// A sampled plan: the children (as `Grouper::finish` gives them) and the partition count.
#[derive(Debug)]
pub struct Sampled {
    pub children: Vec<PlannedChild>,
    pub partitions: u64,
}

/// The facts of the parent a plan needs besides its index.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub partitioner: Partitioner,
    pub data_length: u64,
    pub index_length: u64,
    /// Grid unit (chunk length, or the CRC block of an uncompressed parent).
    pub grid: u64,
    pub min_dead_prefix: u64,
    pub merge_below_units: u64,
}

fn boundary(e: &ProbeEntry, prev: &ProbeEntry) -> Boundary {
    Boundary {
        ordinal: e.ordinal,
        position: e.position,
        index_offset: e.index_offset,
        key: e.key.clone(),
        token: e.token.to_string(),
        prev_key: prev.key.clone(),
        prev_token: prev.token.to_string(),
        prev_position: prev.position,
    }
}

/// Plans `cut` from the probe's samples; see the module comment.
pub fn plan<P: IndexProbe>(probe: &mut P, cut: &Cut, s: Shape) -> Result<Sampled, ProbeError> {
    let interval = probe.interval();
    let samples = probe.samples();
    if samples == 0 || interval == 0 {
        return Err(ProbeError::Irregular("Summary.db has no samples".into()));
    }
    let grid = s.grid.max(1);
    // The tail: partition count and last key; for --parts also the last N-1 partition
    // starts (with the key before each), from which cuts the scan cannot make are made.
    let last_sample = samples - 1;
    let want_recent = match cut {
        Cut::Parts(n) => n.saturating_sub(1) as u64,
        _ => 0,
    };
    let (total, last, recent) = {
        let mut from = last_sample;
        loop {
            probe.seek(from)?;
            let mut recent: VecDeque<Boundary> = VecDeque::new();
            let mut prev: Option<ProbeEntry> = None;
            while let Some(e) = probe.next()? {
                if let (Some(p), true) = (&prev, want_recent > 0 && e.ordinal > 0) {
                    if recent.len() as u64 == want_recent {
                        recent.pop_front();
                    }
                    recent.push_back(boundary(&e, p));
                }
                prev = Some(e);
            }
            let Some(last) = prev else {
                return Err(ProbeError::Irregular(format!(
                    "Summary.db sample {from} has no Index.db entry"
                )));
            };
            let total = last.ordinal + 1;
            // Enough starts read (or all of them): every start of the last N-1 has its
            // predecessor read too.
            let first_read = from as u64 * interval;
            let enough = from == 0 || total - first_read > want_recent;
            if enough {
                break (total, last, recent);
            }
            from = ((total.saturating_sub(want_recent + 1)) / interval) as usize;
        }
    };
    probe.seek(0)?;
    let first = probe
        .next()?
        .ok_or_else(|| ProbeError::Irregular("Index.db has no entry at sample 0".into()))?;
    if first.ordinal != 0 || first.index_offset != 0 {
        return Err(ProbeError::Irregular(format!(
            "Summary.db's first sample is at Index.db offset {}, not 0",
            first.index_offset
        )));
    }

    // Cuts: (group of the run that starts there, where it starts).
    let mut cuts: Vec<(Group, Boundary)> = Vec::new();
    let first_group;
    let mut deferred: Option<Boundary> = None;
    match cut {
        Cut::Tokens(b) => {
            first_group = Group::Index(b.partition_point(|x| *x < first.token));
            by_breakpoints(probe, b, first.clone(), first_group, &mut cuts, |t| {
                Group::Index(b.partition_point(|x| x < t))
            })?;
        }
        Cut::Ranges(r) => {
            let mut bps: Vec<Token> = r
                .full
                .iter()
                .chain(&r.transient)
                .flat_map(|x| [x.left.clone(), x.right.clone()])
                .collect();
            bps.sort();
            bps.dedup();
            let label = |t: &Token| Group::Label(r.label(s.partitioner, t));
            first_group = Group::Label(r.label(s.partitioner, &first.token));
            by_breakpoints(probe, &bps, first.clone(), first_group, &mut cuts, label)?;
        }
        Cut::Owned(o) => {
            let group = |t: &Token| super::plan::owned_group(o, s.partitioner, t);
            first_group = super::plan::owned_group(o, s.partitioner, &first.token);
            by_breakpoints(
                probe,
                &o.bounds(),
                first.clone(),
                first_group,
                &mut cuts,
                group,
            )?;
        }
        Cut::Parts(n) => {
            first_group = Group::Index(0);
            let n = *n;
            let mut cur = first.clone();
            let mut made = 1usize;
            'cuts: while made < n {
                let remaining = (n - made + 1) as u64;
                let target = cur.position + s.data_length.saturating_sub(cur.position) / remaining;
                // The last sample before the target, from the one holding `cur` on.
                let js = ((cur.ordinal / interval) as usize).min(last_sample);
                let lo = last_sample_before(probe, js, last_sample, target)?;
                probe.seek(lo)?;
                let mut prev: Option<ProbeEntry> = None;
                let mut rejected = 0u32;
                let mut first_candidate: Option<Boundary> = None;
                loop {
                    let Some(e) = probe.next()? else {
                        deferred = first_candidate;
                        break 'cuts;
                    };
                    if e.ordinal <= cur.ordinal || e.position < target {
                        prev = Some(e);
                        continue;
                    }
                    let Some(p) = &prev else {
                        return Err(ProbeError::Irregular(format!(
                            "partition {} is past the target but no entry before it was read",
                            e.ordinal
                        )));
                    };
                    let b = boundary(&e, p);
                    if e.position % grid >= s.min_dead_prefix || rejected >= PARTS_PATIENCE {
                        cuts.push((Group::Index(made), b));
                        made += 1;
                        cur = e;
                        continue 'cuts;
                    }
                    if rejected == 0 {
                        first_candidate = Some(b);
                    }
                    rejected += 1;
                    prev = Some(e);
                }
            }
        }
    }

    // Runs between consecutive cuts; the last to the end of Index.db and Data.db.
    let mut runs: Vec<(Group, Run)> = Vec::with_capacity(cuts.len() + 1);
    let mut open = (
        first_group,
        Run {
            first_ordinal: 0,
            last_ordinal: 0,
            first_position: first.position,
            last_position: 0,
            end_position: 0,
            first_key: first.key.clone(),
            last_key: Vec::new(),
            first_token: first.token.to_string(),
            last_token: String::new(),
            index_start: 0,
            index_end: 0,
        },
    );
    for (g, b) in cuts {
        let (og, mut r) = std::mem::replace(
            &mut open,
            (
                g,
                Run {
                    first_ordinal: b.ordinal,
                    last_ordinal: 0,
                    first_position: b.position,
                    last_position: 0,
                    end_position: 0,
                    first_key: b.key,
                    last_key: Vec::new(),
                    first_token: b.token,
                    last_token: String::new(),
                    index_start: b.index_offset,
                    index_end: 0,
                },
            ),
        );
        r.last_ordinal = b.ordinal - 1;
        r.end_position = b.position;
        r.last_key = b.prev_key;
        r.last_token = b.prev_token;
        r.last_position = b.prev_position;
        r.index_end = b.index_offset;
        runs.push((og, r));
    }
    let (g, mut r) = open;
    r.last_ordinal = total - 1;
    r.end_position = s.data_length;
    r.last_key = last.key;
    r.last_token = last.token.to_string();
    r.last_position = last.position;
    r.index_end = s.index_length;
    runs.push((g, r));
    Ok(Sampled {
        children: assemble(
            cut,
            runs,
            deferred,
            recent,
            total,
            s.merge_below_units,
            grid,
        ),
        partitions: total,
    })
}

/// The last sample in `[lo, hi]` whose partition starts before `target` (`lo` when none
/// does). Each probe is a point read of Index.db, cold on a first split: positions grow
/// about linearly with the sample index, so the search interpolates, and bisects every
/// other step to stay O(log n) whatever the partition sizes.
fn last_sample_before<P: IndexProbe>(
    probe: &mut P,
    mut lo: usize,
    mut hi: usize,
    target: u64,
) -> Result<usize, ProbeError> {
    let mut p_lo = probe.sample_position(lo)?;
    if p_lo >= target {
        return Ok(lo);
    }
    let mut p_hi = probe.sample_position(hi)?;
    if p_hi < target {
        return Ok(hi);
    }
    // p_lo < target <= p_hi
    let mut bisect = false;
    while hi - lo > 1 {
        let mid = if bisect {
            lo + (hi - lo) / 2
        } else {
            let span = (hi - lo) as u128;
            let step = (target - p_lo) as u128 * span / (p_hi - p_lo).max(1) as u128;
            lo + (step as usize).clamp(1, hi - lo - 1)
        };
        bisect = !bisect;
        let p = probe.sample_position(mid)?;
        if p < target {
            lo = mid;
            p_lo = p;
        } else {
            hi = mid;
            p_hi = p;
        }
    }
    Ok(lo)
}

/// Cuts of a group that is constant between consecutive `breakpoints` (sorted): on
/// `(bp[k-1], bp[k]]` for tokens (`--tokens` boundaries, range ends), so a run can only end
/// before the first partition past some breakpoint. From `cur`, the next breakpoint at or
/// above its token, the first partition past it (found from the last sample not past it:
/// at most one interval of entries), and a cut there when its group differs.
fn by_breakpoints<P: IndexProbe>(
    probe: &mut P,
    breakpoints: &[Token],
    mut cur: ProbeEntry,
    mut group: Group,
    cuts: &mut Vec<(Group, Boundary)>,
    group_of: impl Fn(&Token) -> Group,
) -> Result<(), ProbeError> {
    let samples = probe.samples();
    loop {
        let k = breakpoints.partition_point(|b| *b < cur.token);
        let Some(bp) = breakpoints.get(k) else {
            return Ok(());
        };
        // Samples up to `j` have tokens <= bp; sample 0 is partition 0, at or before `cur`.
        let mut lo = 0usize;
        let mut hi = samples;
        while lo < hi {
            let mid = (lo + hi) / 2;
            if probe.sample_token(mid) <= bp {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let j = lo.saturating_sub(1);
        probe.seek(j)?;
        let mut prev: Option<ProbeEntry> = None;
        let next = loop {
            match probe.next()? {
                None => return Ok(()),
                Some(e) if e.token > *bp => break e,
                Some(e) => prev = Some(e),
            }
        };
        let Some(p) = prev else {
            return Err(ProbeError::Irregular(format!(
                "sample {j}'s token is past the breakpoint {bp} it was chosen for"
            )));
        };
        let g = group_of(&next.token);
        if g != group {
            cuts.push((g, boundary(&next, &p)));
            group = g;
        }
        cur = next;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Entries in memory with a sample every `interval` partitions.
    pub(crate) struct VecProbe {
        pub entries: Vec<ProbeEntry>,
        pub interval: u64,
        sample_tokens: Vec<Token>,
        cursor: usize,
        pub reads: u64,
        pub point_reads: u64,
        seen: std::collections::HashSet<usize>,
    }

    impl VecProbe {
        pub(crate) fn new(entries: Vec<ProbeEntry>, interval: u64) -> VecProbe {
            let sample_tokens = entries
                .iter()
                .step_by(interval as usize)
                .map(|e| e.token.clone())
                .collect();
            VecProbe {
                entries,
                interval,
                sample_tokens,
                cursor: 0,
                reads: 0,
                point_reads: 0,
                seen: Default::default(),
            }
        }
    }

    impl IndexProbe for VecProbe {
        fn interval(&self) -> u64 {
            self.interval
        }
        fn samples(&self) -> usize {
            self.sample_tokens.len()
        }
        fn sample_token(&self, j: usize) -> &Token {
            &self.sample_tokens[j]
        }
        fn sample_position(&mut self, j: usize) -> Result<u64, ProbeError> {
            self.reads += 1;
            // FileProbe caches positions: count each sample once.
            if self.seen.insert(j) {
                self.point_reads += 1;
            }
            Ok(self.entries[j * self.interval as usize].position)
        }
        fn seek(&mut self, j: usize) -> Result<(), ProbeError> {
            self.cursor = j * self.interval as usize;
            Ok(())
        }
        fn next(&mut self) -> Result<Option<ProbeEntry>, ProbeError> {
            let e = self.entries.get(self.cursor).cloned();
            self.cursor += 1;
            self.reads += e.is_some() as u64;
            Ok(e)
        }
    }

    fn entries(items: &[(Token, u64)]) -> Vec<ProbeEntry> {
        items
            .iter()
            .enumerate()
            .map(|(i, (t, p))| ProbeEntry {
                ordinal: i as u64,
                key: (i as u32).to_be_bytes().to_vec(),
                token: t.clone(),
                position: *p,
                index_offset: i as u64 * 10,
            })
            .collect()
    }

    /// The streaming `Grouper`'s children for `items`, checked equal to the sampled plan's
    /// at several sampling intervals.
    pub(crate) fn same_as_grouper(
        cut: &Cut,
        items: &[(Token, u64)],
        data_length: u64,
        grid: u64,
        min_dead: u64,
        merge_below: u64,
    ) -> Vec<PlannedChild> {
        use super::super::plan::Grouper;
        let es = entries(items);
        let index_length = es.len() as u64 * 10;
        let mut g = Grouper::new(
            cut.clone(),
            Partitioner::Murmur3,
            data_length,
            grid,
            min_dead,
        );
        for e in &es {
            g.push(&e.key, &e.token, e.position, e.index_offset);
        }
        let want = g.finish(merge_below, index_length);
        let shape = Shape {
            partitioner: Partitioner::Murmur3,
            data_length,
            index_length,
            grid,
            min_dead_prefix: min_dead,
            merge_below_units: merge_below,
        };
        for interval in [1u64, 2, 3, 7, 64, 128] {
            let mut probe = VecProbe::new(es.clone(), interval);
            let got = plan(&mut probe, cut, shape).expect("sampled plan");
            assert_eq!(got.partitions, es.len() as u64);
            assert_eq!(got.children, want, "interval {interval}, cut {cut:?}");
        }
        want
    }

    /// A small deterministic generator (xorshift) for the randomised comparisons.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// `count` partitions with increasing tokens and positions (sizes 1..=max_size).
    fn random_table(rng: &mut Rng, count: usize, max_size: u64) -> (Vec<(Token, u64)>, u64) {
        let mut tokens: Vec<i64> = (0..count).map(|_| rng.next() as i64).collect();
        tokens.sort();
        let mut pos = 0;
        let items = tokens
            .into_iter()
            .map(|t| {
                let p = pos;
                pos += 1 + rng.below(max_size);
                (Token::Murmur3(t), p)
            })
            .collect();
        (items, pos)
    }

    #[test]
    fn sampled_parts_equal_the_full_pass() {
        let mut rng = Rng(0x2155_0c1e_a7e0_0001);
        for round in 0..300 {
            let count = 1 + rng.below(if round % 3 == 0 { 20 } else { 1500 }) as usize;
            let max_size = [10, 1000, 70_000][round % 3];
            let (items, len) = random_table(&mut rng, count, max_size);
            let n = 2 + rng.below(12) as usize;
            let grid = [4096u64, 16384, 65536][rng.below(3) as usize];
            let min_dead = [0, 1000, grid / 4 + 64, grid + 1][rng.below(4) as usize];
            let c = same_as_grouper(&Cut::Parts(n), &items, len, grid, min_dead, 0);
            assert_eq!(c.len(), n.min(count), "round {round}");
        }
    }

    #[test]
    fn sampled_token_cuts_equal_the_full_pass() {
        let mut rng = Rng(0x0bad_5eed_0000_0002);
        for _ in 0..200 {
            let count = 1 + rng.below(2000) as usize;
            let (items, len) = random_table(&mut rng, count, 5000);
            let mut b: Vec<i64> = (0..1 + rng.below(20)).map(|_| rng.next() as i64).collect();
            // Boundaries on partition tokens too: the (left, right] edge.
            for _ in 0..3 {
                if let Token::Murmur3(t) = &items[rng.below(count as u64) as usize].0 {
                    b.push(*t);
                }
            }
            b.sort();
            b.dedup();
            let b: Vec<Token> = b.into_iter().map(Token::Murmur3).collect();
            same_as_grouper(&Cut::Tokens(b), &items, len, 16384, 0, 0);
        }
    }

    #[test]
    fn sampled_owned_ranges_equal_the_full_pass() {
        use crate::split::spec::OwnedRanges;
        use crate::sstable::TokenRange;
        let mut rng = Rng(0x7a11_ce00_0000_0019);
        for round in 0..200 {
            let count = 1 + rng.below(2000) as usize;
            let (items, len) = random_table(&mut rng, count, 5000);
            let mut ends: Vec<i64> = (0..2 * (1 + rng.below(48)))
                .map(|_| rng.next() as i64)
                .collect();
            ends.sort();
            ends.dedup();
            let mut ranges: Vec<TokenRange> = ends
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| TokenRange::new(Token::Murmur3(c[0]), Token::Murmur3(c[1])))
                .collect();
            // Now and then the last range wraps around the ring's end instead.
            if round % 4 == 0 && ranges.len() > 1 {
                let last = ranges.pop().expect("two ranges");
                let first = ranges.remove(0);
                ranges.push(TokenRange::new(last.left, first.right));
            }
            let o = OwnedRanges { ranges };
            o.validate(crate::sstable::Partitioner::Murmur3)
                .expect("disjoint ranges");
            for merge in [0, 8] {
                same_as_grouper(&Cut::Owned(o.clone()), &items, len, 16384, 0, merge);
            }
        }
    }

    #[test]
    fn sampled_ranges_equal_the_full_pass() {
        use crate::split::spec::{RepairSession, RepairedRanges};
        use crate::sstable::TokenRange;
        let mut rng = Rng(0x7a11_ce00_0000_0003);
        for round in 0..200 {
            let count = 1 + rng.below(2000) as usize;
            let (items, len) = random_table(&mut rng, count, 5000);
            let mut ends: Vec<i64> = (0..2 * (1 + rng.below(40)))
                .map(|_| rng.next() as i64)
                .collect();
            ends.sort();
            ends.dedup();
            let ranges: Vec<TokenRange> = ends
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| TokenRange::new(Token::Murmur3(c[0]), Token::Murmur3(c[1])))
                .collect();
            // Every other range transient; one wrap-around range now and then.
            let (mut full, mut transient): (Vec<_>, Vec<_>) = (Vec::new(), Vec::new());
            for (i, r) in ranges.into_iter().enumerate() {
                if i % 2 == 0 {
                    full.push(r)
                } else {
                    transient.push(r)
                }
            }
            if round % 5 == 0 && !full.is_empty() {
                let r = full.remove(0);
                full.push(TokenRange::new(r.right, r.left));
            }
            let r = RepairedRanges {
                full,
                transient,
                session: RepairSession::Pending([7; 16]),
            };
            for merge in [0, 8] {
                same_as_grouper(&Cut::Ranges(r.clone()), &items, len, 16384, 0, merge);
            }
        }
    }

    #[test]
    fn a_sampled_cut_reads_a_few_intervals_not_the_index() {
        // 100,000 partitions, samples every 128: --parts 8 reads far less than the index.
        let items: Vec<(Token, u64)> = (0..100_000)
            .map(|i| (Token::Murmur3(i as i64 * 1000), i as u64 * 65_536 + 100))
            .collect();
        let es = entries(&items);
        let mut probe = VecProbe::new(es, 128);
        let shape = Shape {
            partitioner: Partitioner::Murmur3,
            data_length: 100_000 * 65_536 + 100,
            index_length: 1_000_000,
            grid: 16384,
            min_dead_prefix: 4096 + 64,
            merge_below_units: 0,
        };
        let s = plan(&mut probe, &Cut::Parts(8), shape).expect("plan");
        assert_eq!(s.children.len(), 8);
        assert!(
            probe.reads < 8 * (128 + 64 + 20) + 400,
            "{} reads",
            probe.reads
        );
        // The interpolating search needs a few point reads per cut, not log2(782) = 10.
        assert!(
            probe.point_reads <= 7 * 4 + 2,
            "{} point reads",
            probe.point_reads
        );
    }
}

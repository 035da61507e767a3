//! LZ4 chunk encodings whose stored length cleave chooses.
//!
//! A child's first chunk must decode to `dead` zero bytes (the dead prefix, zero-filled so
//! that a linear reader sees no foreign partition bytes) followed by the live bytes. LZ4
//! leaves freedom in how those bytes are encoded, and cleave spends it on the stored
//! length: the `aligned` layout needs the next chunk to land at a destination offset
//! congruent to its source offset modulo the filesystem block, `padded` needs the first
//! chunk to keep its exact original length.
//!
//! Two knobs, both producing the same decoded bytes:
//! * the zero run: `z` literal zeros then one offset-1 match of `dead - z` bytes; every
//!   `z` from 1 to `dead - 4` is valid, and the stored length grows by one byte per step
//!   (plus one at each 255-byte boundary of the length extensions);
//! * the live bytes: the first `m` of them as extra literals of the first sequence of an
//!   LZ4 block compressing the rest (matches are backward distances, so a block compressed
//!   standalone stays valid after anything that precedes it).
//!
//! The block keeps LZ4's end-of-block rules (last sequence literal-only, last five bytes
//! literals, last match at least 12 bytes before the end) because the live part comes
//! from a conforming compressor and is at least 16 bytes long whenever a zero-run match is
//! emitted. Cassandra's `LZ4Compressor` frames a block with its 4-byte little-endian
//! decompressed length.

/// Bytes the LZ4 length-extension scheme adds for a 4-bit field holding `n`.
fn ext_len(n: usize) -> usize {
    if n < 15 {
        0
    } else {
        1 + (n - 15) / 255
    }
}

fn put_ext(n: usize, out: &mut Vec<u8>) {
    if n < 15 {
        return;
    }
    let mut rest = n - 15;
    while rest >= 255 {
        out.push(255);
        rest -= 255;
    }
    out.push(rest as u8);
}

/// An LZ4 block of `live` whose first sequence carries `live[..m]` as extra literals.
fn live_block(live: &[u8], m: usize) -> Vec<u8> {
    let rest = lz4_flex::block::compress(&live[m..]);
    if m == 0 {
        return rest;
    }
    // Re-write the first token of `rest` with m more literals.
    let mut out = Vec::with_capacity(rest.len() + m + 8);
    let (lit, mut p) = if rest.is_empty() {
        (0usize, 0usize)
    } else {
        let token = rest[0];
        let mut lit = (token >> 4) as usize;
        let mut p = 1;
        if lit == 15 {
            loop {
                let b = rest[p];
                p += 1;
                lit += b as usize;
                if b != 255 {
                    break;
                }
            }
        }
        (lit, p)
    };
    let total = lit + m;
    let match_nibble = rest.first().map_or(0, |t| t & 0x0F);
    out.push(((total.min(15) as u8) << 4) | match_nibble);
    put_ext(total, &mut out);
    out.extend_from_slice(&live[..m]);
    if rest.is_empty() {
        return out;
    }
    out.extend_from_slice(&rest[p..p + lit]);
    p += lit;
    out.extend_from_slice(&rest[p..]);
    out
}

/// Cassandra's LZ4 chunk framing: 4-byte little-endian decoded length, then the block.
fn frame(decoded_len: usize, block_parts: &[&[u8]]) -> Vec<u8> {
    let n: usize = block_parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(4 + n);
    out.extend_from_slice(&(decoded_len as u32).to_le_bytes());
    for p in block_parts {
        out.extend_from_slice(p);
    }
    out
}

/// Plain encoding of `dead` zeros then `live` (what any compressor would do).
pub fn encode_plain(dead: usize, live: &[u8]) -> Vec<u8> {
    encode_plain_pieces(&[Piece::Run(0, dead)], live)
}

/// Plain encoding of `prefix` then `live`.
pub fn encode_plain_pieces(prefix: &[Piece<'_>], live: &[u8]) -> Vec<u8> {
    let mut buf = materialize(prefix);
    buf.extend_from_slice(live);
    frame(buf.len(), &[&lz4_flex::block::compress(&buf)])
}

/// The bytes a chunk holds before its live bytes, as the tunable encoder sees them: the
/// zeros of a dead prefix are one `Run`; a filler partition (`sstable::filler`) is its
/// framing and counter as `Lit` around the `Run` of its key's padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    Lit(&'a [u8]),
    Run(u8, usize),
}

fn materialize(prefix: &[Piece<'_>]) -> Vec<u8> {
    let mut b = Vec::new();
    for p in prefix {
        match *p {
            Piece::Lit(l) => b.extend_from_slice(l),
            Piece::Run(x, n) => b.extend(std::iter::repeat_n(x, n)),
        }
    }
    b
}

/// Stored bytes of one sequence: `lits` literals, then a match of `ml` (>= 4) at offset 1.
fn seq_len(lits: usize, ml: usize) -> usize {
    1 + ext_len(lits) + lits + 2 + ext_len(ml - 4)
}

fn put_seq(lits: &[u8], ml: usize, out: &mut Vec<u8>) {
    let m = ml - 4;
    out.push(((lits.len().min(15) as u8) << 4) | m.min(15) as u8);
    put_ext(lits.len(), out);
    out.extend_from_slice(lits);
    out.extend_from_slice(&1u16.to_le_bytes());
    put_ext(m, out);
}

/// One run of the prefix as a sequence: `lits` literals, then `run` bytes of `byte` of
/// which `z` (its knob, 1..=run-4) go as literals too and the rest as a match at offset 1.
struct RunSeq {
    lits: Vec<u8>,
    byte: u8,
    run: usize,
}

impl RunSeq {
    fn len(&self, z: usize) -> usize {
        seq_len(self.lits.len() + z, self.run - z)
    }
    fn max_z(&self) -> usize {
        self.run - 4
    }
    fn put(&self, z: usize, out: &mut Vec<u8>) {
        let mut l = self.lits.clone();
        l.extend(std::iter::repeat_n(self.byte, z));
        put_seq(&l, self.run - z, out);
    }
}

/// A prefix cut into LZ4 sequences at its runs (each a knob: one more byte moved from a
/// run's match to its literals stores one more byte, or two at a length-extension
/// boundary); `tail` are the literals after the last run, left for the live block's first
/// sequence.
struct Sequences {
    runs: Vec<RunSeq>,
    tail: Vec<u8>,
}

/// Runs shorter than this stay literals (a match needs at least 4 bytes after a literal).
const MIN_RUN: usize = 5;

fn sequences(prefix: &[Piece<'_>]) -> Option<Sequences> {
    let mut acc: Vec<u8> = Vec::new();
    let mut runs = Vec::new();
    for p in prefix {
        match *p {
            Piece::Lit(l) => acc.extend_from_slice(l),
            Piece::Run(x, n) if n < MIN_RUN => acc.extend(std::iter::repeat_n(x, n)),
            Piece::Run(x, n) => runs.push(RunSeq {
                lits: std::mem::take(&mut acc),
                byte: x,
                run: n,
            }),
        }
    }
    if runs.is_empty() {
        return None;
    }
    Some(Sequences { runs, tail: acc })
}

impl Sequences {
    fn min_len(&self) -> usize {
        self.runs.iter().map(|r| r.len(1)).sum()
    }
    fn max_len(&self) -> usize {
        self.runs.iter().map(|r| r.len(r.max_z())).sum()
    }
    /// Knobs whose sequences store exactly `want` bytes: each run but the last takes the
    /// largest knob that leaves the others their minimum, the last is searched.
    fn knobs_for(&self, want: usize) -> Option<Vec<usize>> {
        let mut left = want;
        let mut zs = Vec::with_capacity(self.runs.len());
        let n = self.runs.len();
        for (i, r) in self.runs.iter().enumerate() {
            let rest_min: usize = self.runs[i + 1..].iter().map(|r| r.len(1)).sum();
            let budget = left.checked_sub(rest_min)?;
            let z = if i + 1 == n {
                (1..=r.max_z()).find(|z| r.len(*z) == budget)?
            } else {
                // Largest z with len(z) <= budget: len is nondecreasing in z.
                let (mut lo, mut hi) = (1usize, r.max_z());
                if r.len(lo) > budget {
                    return None;
                }
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    if r.len(mid) <= budget {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo
            };
            left -= r.len(z);
            zs.push(z);
        }
        (left == 0).then_some(zs)
    }
    fn put(&self, zs: &[usize], out: &mut Vec<u8>) {
        for (r, z) in self.runs.iter().zip(zs) {
            r.put(*z, out);
        }
    }
}

/// What the stored (framed) payload length must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthTarget {
    /// `(len + add) % modulus == residue`: the next chunk lands on a given residue.
    Residue {
        add: usize,
        modulus: usize,
        residue: usize,
    },
    /// Exactly this many bytes.
    Exact(usize),
}

impl LengthTarget {
    fn accepts(&self, len: usize) -> bool {
        match *self {
            LengthTarget::Residue {
                add,
                modulus,
                residue,
            } => (len + add) % modulus == residue,
            LengthTarget::Exact(n) => len == n,
        }
    }

    /// Acceptable lengths from `from` upwards, at most `n` of them.
    fn candidates(&self, from: usize, n: usize) -> Vec<usize> {
        match *self {
            LengthTarget::Exact(x) => vec![x],
            LengthTarget::Residue {
                add,
                modulus,
                residue,
            } => {
                let r0 = (from + add) % modulus;
                let first = from + (residue + modulus - r0) % modulus;
                (0..n).map(|i| first + i * modulus).collect()
            }
        }
    }
}

/// Searches encodings of `dead` zeros followed by `live` for a framed payload whose length
/// meets `target` (`encode_tuned_pieces` with the zeros as one run).
pub fn encode_tuned(dead: usize, live: &[u8], target: LengthTarget) -> Option<Vec<u8>> {
    encode_tuned_pieces(&[Piece::Run(0, dead)], live, target)
}

/// Searches encodings of `prefix` followed by `live` for a framed payload whose length
/// meets `target`. The stored length of "first `m` live bytes as literals, the rest
/// compressed" grows roughly monotonically with `m`, so each candidate length is found by a
/// binary search on `m` and a short probe around it; the prefix's runs then fill the last
/// bytes exactly (`Sequences::knobs_for`). `None` when no encoding fits (the caller falls
/// back and says why).
pub fn encode_tuned_pieces(
    prefix: &[Piece<'_>],
    live: &[u8],
    target: LengthTarget,
) -> Option<Vec<u8>> {
    let decoded = materialize(prefix).len() + live.len();
    // With a run of at least 5 bytes and 16 live bytes, the runs are literal+match
    // sequences whose lengths are tunable; otherwise the prefix joins the live bytes.
    let seqs = if live.len() >= 16 {
        sequences(prefix)
    } else {
        None
    };
    let joined: Vec<u8>;
    let (body, m_min): (&[u8], usize) = match &seqs {
        Some(s) if s.tail.is_empty() => (live, 0),
        Some(s) => {
            joined = [s.tail.as_slice(), live].concat();
            (&joined, s.tail.len())
        }
        None => {
            joined = [materialize(prefix).as_slice(), live].concat();
            (&joined, 0)
        }
    };
    let (run_min, run_max) = seqs.as_ref().map_or((0, 0), |s| (s.min_len(), s.max_len()));
    // f(m): framed length with the shortest runs.
    let f = |m: usize| 4 + run_min + live_block(body, m).len();
    let (f_lo, f_hi) = (f(m_min), f(body.len()));
    for t in target.candidates(f_lo, 8) {
        if t > f_hi + (run_max - run_min) {
            break;
        }
        // Largest m with f(m) <= t.
        let (mut lo, mut hi) = (m_min, body.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if f(mid) <= t {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        for m in lo.saturating_sub(16).max(m_min)..=(lo + 16).min(body.len()) {
            let block = live_block(body, m);
            let fixed = 4 + block.len();
            match &seqs {
                Some(s) => {
                    let Some(want) = t.checked_sub(fixed) else {
                        continue;
                    };
                    if want < run_min || want > run_max || !target.accepts(t) {
                        continue;
                    }
                    if let Some(zs) = s.knobs_for(want) {
                        let mut out = Vec::with_capacity(t);
                        out.extend_from_slice(&(decoded as u32).to_le_bytes());
                        s.put(&zs, &mut out);
                        out.extend_from_slice(&block);
                        debug_assert_eq!(out.len(), t);
                        return Some(out);
                    }
                }
                None => {
                    if fixed == t && target.accepts(fixed) {
                        return Some(frame(decoded, &[&block]));
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zero_run_len(dead: usize, z: usize) -> usize {
        seq_len(z, dead - z)
    }

    fn put_zero_run(dead: usize, z: usize, out: &mut Vec<u8>) {
        put_seq(&vec![0u8; z], dead - z, out);
    }

    fn decode(payload: &[u8]) -> Vec<u8> {
        let n = u32::from_le_bytes(payload[..4].try_into().unwrap()) as usize;
        lz4_flex::block::decompress(&payload[4..], n).expect("valid LZ4")
    }

    fn sample(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| ((i * 7919) % 251) as u8 ^ (i / 97) as u8)
            .collect()
    }

    #[test]
    fn every_zero_run_length_decodes() {
        let live = sample(3000);
        for dead in [5usize, 16, 300, 5000] {
            let mut lens = Vec::new();
            for z in 1..=dead - 4 {
                let mut b = Vec::new();
                put_zero_run(dead, z, &mut b);
                assert_eq!(b.len(), zero_run_len(dead, z));
                b.extend_from_slice(&lz4_flex::block::compress(&live));
                let out = lz4_flex::block::decompress(&b, dead + live.len()).unwrap();
                assert!(out[..dead].iter().all(|x| *x == 0));
                assert_eq!(&out[dead..], live.as_slice());
                lens.push(b.len());
            }
            assert!(
                lens.windows(2).all(|w| w[1] >= w[0] && w[1] - w[0] <= 2),
                "monotone, small steps"
            );
        }
    }

    #[test]
    fn live_literals_keep_the_bytes() {
        let live = sample(5000);
        for m in [0, 1, 14, 15, 16, 270, 4999, 5000] {
            let b = live_block(&live, m);
            assert_eq!(
                lz4_flex::block::decompress(&b, live.len()).unwrap(),
                live,
                "m={m}"
            );
        }
    }

    #[test]
    fn hits_every_residue_with_a_block_sized_dead_prefix() {
        let live = sample(16384 - 6000);
        for r in (0..4096).step_by(97) {
            let t = LengthTarget::Residue {
                add: 0,
                modulus: 4096,
                residue: r,
            };
            let p = encode_tuned(6000, &live, t).expect("residue reachable");
            assert_eq!(p.len() % 4096, r);
            let out = decode(&p);
            assert!(out[..6000].iter().all(|x| *x == 0));
            assert_eq!(&out[6000..], live.as_slice());
        }
    }

    #[test]
    fn small_dead_prefix_uses_live_literals() {
        // Compressible live bytes leave slack even when the dead prefix is tiny.
        let live: Vec<u8> = (0..16000).map(|i| (i % 13) as u8).collect();
        let mut hits = 0;
        for r in (0..4096).step_by(256) {
            let t = LengthTarget::Residue {
                add: 0,
                modulus: 4096,
                residue: r,
            };
            if let Some(p) = encode_tuned(3, &live, t) {
                assert_eq!(p.len() % 4096, r);
                let out = decode(&p);
                assert_eq!(&out[..3], &[0, 0, 0]);
                assert_eq!(&out[3..], live.as_slice());
                hits += 1;
            }
        }
        assert!(hits >= 12, "only {hits} of 16 residues reached");
    }

    #[test]
    fn exact_length_for_padded() {
        let live = sample(10000);
        let plain = encode_plain(6000, &live).len();
        for want in [plain, plain + 1, plain + 1000, plain + 5000] {
            let p = encode_tuned(6000, &live, LengthTarget::Exact(want)).expect("exact length");
            assert_eq!(p.len(), want);
            assert_eq!(&decode(&p)[6000..], live.as_slice());
        }
    }

    #[test]
    fn filler_prefixes_decode_and_reach_every_residue() {
        // Two filler-like partitions: framing literals around '0' runs, then live bytes.
        let head = [0u8, 200];
        let tail = [b'a'; 29];
        let prefix = [
            Piece::Lit(&head),
            Piece::Run(b'0', 5000),
            Piece::Lit(&tail),
            Piece::Lit(&head),
            Piece::Run(b'0', 3000),
            Piece::Lit(&tail),
            Piece::Run(7, 3),
        ];
        let want = materialize(&prefix);
        let live = sample(16384 - want.len());
        reaches_residues(&prefix, &live, 61);
        let plain = decode(&encode_plain_pieces(&prefix, &live));
        assert_eq!(&plain[..want.len()], want.as_slice());
    }

    #[test]
    fn many_short_runs_reach_every_residue_together() {
        // 60 fillers of 270 bytes: no single run spans a block, all of them together do.
        let head = [1u8, 2];
        let tail = [b'a'; 13];
        let mut prefix = Vec::new();
        for _ in 0..60 {
            prefix.push(Piece::Lit(&head));
            prefix.push(Piece::Run(b'0', 255));
            prefix.push(Piece::Lit(&tail));
        }
        let live = sample(16384 - materialize(&prefix).len());
        reaches_residues(&prefix, &live, 37);
    }

    /// Every `step`-th residue modulo 4096 has an encoding of `prefix` then `live` that
    /// decodes to exactly those bytes.
    fn reaches_residues(prefix: &[Piece<'_>], live: &[u8], step: usize) {
        let want = materialize(prefix);
        for r in (0..4096).step_by(step) {
            let t = LengthTarget::Residue {
                add: 0,
                modulus: 4096,
                residue: r,
            };
            let p = encode_tuned_pieces(prefix, live, t).expect("residue reachable");
            assert_eq!(p.len() % 4096, r);
            let out = decode(&p);
            assert_eq!(&out[..want.len()], want.as_slice());
            assert_eq!(&out[want.len()..], live);
        }
    }
}

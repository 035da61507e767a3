//! What a split is asked to do: where to cut, and which repair metadata each child gets.

use std::fmt;

use crate::sstable::{Partitioner, Token, TokenRange};

/// How the parent's partitions are divided.
#[derive(Debug, Clone, PartialEq)]
pub enum Cut {
    /// Boundaries `b1 < b2 < … < bn`: child i holds tokens in `(b(i-1), b(i)]`, the first
    /// `(MIN, b1]`, the last `(bn, MAX]` (`dht/Range`: a range excludes its left bound).
    Tokens(Vec<Token>),
    /// About equal bytes of Data.db in each of N children, cut at partition boundaries.
    Parts(usize),
    /// Anticompaction: partitions in `full` ranges, in `transient` ranges, and the rest.
    Ranges(RepairedRanges),
    /// Cleanup (`split::cleanup`): partitions in the owned ranges go to children, in runs
    /// as anticompaction cuts them; the others are dropped. Children keep the parent's
    /// repair metadata, level and commit-log intervals.
    Owned(OwnedRanges),
}

/// The ranges a node owns (`StorageService.getLocalReplicas`, as `nodetool cleanup` keeps
/// them): non-empty and pairwise disjoint (`validate`).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedRanges {
    pub ranges: Vec<TokenRange>,
}

impl OwnedRanges {
    /// Refuses an empty set (it would drop every partition of the table: `nodetool cleanup`
    /// on a node that owns nothing is a decommission, not a cleanup) and overlapping ranges
    /// (a list a ring never produces: a typo, or ranges of two nodes pasted together).
    pub fn validate(&self, p: Partitioner) -> Result<(), String> {
        if self.ranges.is_empty() {
            return Err("no owned ranges: cleanup would drop every partition of the table".into());
        }
        let all: Vec<(usize, &TokenRange)> = self.ranges.iter().map(|r| (0, r)).collect();
        if let Some((a, b)) = first_overlap(p, &all, false) {
            return Err(format!(
                "owned ranges ({}, {}] and ({}, {}] overlap",
                a.left, a.right, b.left, b.right
            ));
        }
        Ok(())
    }

    pub fn contains(&self, p: Partitioner, t: &Token) -> bool {
        self.ranges.iter().any(|r| r.contains(p, t))
    }

    /// Every range bound, sorted and deduplicated: where ownership can change.
    pub fn bounds(&self) -> Vec<Token> {
        let mut v: Vec<Token> = self
            .ranges
            .iter()
            .flat_map(|r| [r.left.clone(), r.right.clone()])
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RepairedRanges {
    pub full: Vec<TokenRange>,
    pub transient: Vec<TokenRange>,
    pub session: RepairSession,
}

/// Where repaired data goes: straight to repaired (3.x style), or pending a session (4.0+
/// incremental repair; `CompactionManager.antiCompactGroup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairSession {
    RepairedAt(i64),
    Pending([u8; 16]),
    /// No repair: the ranges only select partitions and every child is unrepaired. A
    /// RangeStream's sender uses it, as Cassandra resets streamed sstables outside a repair
    /// session to repairedAt 0 (`CassandraEntireSSTableStreamReader`).
    Unrepaired,
}

/// Which anticompaction writer a partition goes to (`CompactionManager.antiCompactGroup`:
/// full ranges are checked first, then transient, else unrepaired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    Full,
    Transient,
    Unrepaired,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Label::Full => "full",
            Label::Transient => "transient",
            Label::Unrepaired => "unrepaired",
        })
    }
}

/// The repair triple of Statistics.db STATS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairTriple {
    pub repaired_at: i64,
    pub pending_repair: Option<[u8; 16]>,
    pub is_transient: bool,
}

impl RepairTriple {
    /// `SSTable.validateRepairedMetadata`: a pending session excludes repairedAt, and only
    /// data pending a session can be transient.
    pub fn validate(&self) -> Result<(), String> {
        if self.pending_repair.is_some() && self.repaired_at != 0 {
            return Err(format!(
                "repairedAt {} with a pending repair session: Cassandra requires repairedAt = 0 while a session is pending",
                self.repaired_at
            ));
        }
        if self.is_transient && self.pending_repair.is_none() {
            return Err(
                "isTransient without a pending repair session: only pending data can be transient"
                    .into(),
            );
        }
        if self.repaired_at < 0 {
            return Err(format!("repairedAt {} is negative", self.repaired_at));
        }
        Ok(())
    }
}

impl RepairedRanges {
    pub fn validate(&self, p: Partitioner) -> Result<(), String> {
        if let RepairSession::RepairedAt(ms) = self.session {
            if ms <= 0 {
                return Err(format!(
                    "--repaired-at {ms}: expected milliseconds since the epoch, > 0"
                ));
            }
            if !self.transient.is_empty() {
                return Err("transient ranges need --pending-repair: transient replicas' data is never marked repaired directly".into());
            }
        }
        if self.session == RepairSession::Unrepaired && !self.transient.is_empty() {
            return Err("transient ranges need --pending-repair".into());
        }
        for (what, ranges) in [("range", &self.full), ("transient range", &self.transient)] {
            for r in ranges.iter() {
                if r.left == r.right && ranges.len() > 1 {
                    return Err(format!(
                        "{what} ({}, {}] is the whole ring and overlaps the others",
                        r.left, r.right
                    ));
                }
            }
        }
        // A token must not be both full and transient: Cassandra checks full first, but
        // a session never declares such ranges, so refuse the ambiguity.
        let all: Vec<(usize, &TokenRange)> = (self.full.iter().map(|r| (0, r)))
            .chain(self.transient.iter().map(|r| (1, r)))
            .collect();
        if let Some((f, t)) = first_overlap(p, &all, true) {
            return Err(format!(
                "full range ({}, {}] and transient range ({}, {}] overlap",
                f.left, f.right, t.left, t.right
            ));
        }
        Ok(())
    }

    pub fn label(&self, p: Partitioner, t: &Token) -> Label {
        if self.full.iter().any(|r| r.contains(p, t)) {
            Label::Full
        } else if self.transient.iter().any(|r| r.contains(p, t)) {
            Label::Transient
        } else {
            Label::Unrepaired
        }
    }

    /// The triple a label's children carry.
    pub fn triple(&self, label: Label) -> RepairTriple {
        match (label, self.session) {
            (Label::Full, RepairSession::RepairedAt(ms)) => RepairTriple {
                repaired_at: ms,
                pending_repair: None,
                is_transient: false,
            },
            (Label::Full, RepairSession::Pending(u)) => RepairTriple {
                repaired_at: 0,
                pending_repair: Some(u),
                is_transient: false,
            },
            (Label::Transient, RepairSession::Pending(u)) => RepairTriple {
                repaired_at: 0,
                pending_repair: Some(u),
                is_transient: true,
            },
            // Refused by validate(); treat as unrepaired rather than invent a triple.
            (Label::Transient, RepairSession::RepairedAt(_))
            | (Label::Unrepaired, _)
            | (_, RepairSession::Unrepaired) => RepairTriple {
                repaired_at: 0,
                pending_repair: None,
                is_transient: false,
            },
        }
    }
}

/// `(l, r]` unwrapped into at most two non-wrapping, non-empty pieces `(left, right]`,
/// `right` None meaning "to the end of the ring" (`dht/Range.unwrap`).
fn pieces(p: Partitioner, r: &TokenRange) -> [Option<(Token, Option<Token>)>; 2] {
    if r.left == r.right {
        [Some((p.min_token(), None)), None]
    } else if r.right == p.min_token() {
        [Some((r.left.clone(), None)), None]
    } else if r.left < r.right {
        [Some((r.left.clone(), Some(r.right.clone()))), None]
    } else {
        [
            Some((r.left.clone(), None)),
            Some((p.min_token(), Some(r.right.clone()))),
        ]
    }
}

/// Two ranges of `ranges` that share a token (a whole-ring range shares every token), for
/// the operator's checks of a spec before anything runs.
pub fn overlapping(p: Partitioner, ranges: &[TokenRange]) -> Option<(&TokenRange, &TokenRange)> {
    let all: Vec<(usize, &TokenRange)> = ranges.iter().map(|r| (0, r)).collect();
    first_overlap(p, &all, false)
}

/// A range of `a` and one of `b` that share a token.
pub fn overlapping_across<'a>(
    p: Partitioner,
    a: &'a [TokenRange],
    b: &'a [TokenRange],
) -> Option<(&'a TokenRange, &'a TokenRange)> {
    let all: Vec<(usize, &TokenRange)> = (a.iter().map(|r| (0, r)))
        .chain(b.iter().map(|r| (1, r)))
        .collect();
    first_overlap(p, &all, true)
}

/// Two ranges of `ranges` (each tagged with its group) that share a token, the one listed
/// first first; with `across`, only a pair from different groups counts. O(n log n): the
/// pieces sorted by left bound, each is compared with the furthest-reaching right bound of
/// the pieces before it (per group), since two non-empty pieces `(l1, r1]`, `(l2, r2]` with
/// `l1 <= l2` intersect exactly when `l2 < r1`. Comparing every pair took 18 s for 15,000
/// ranges (issue 31, item 14).
fn first_overlap<'a>(
    p: Partitioner,
    ranges: &[(usize, &'a TokenRange)],
    across: bool,
) -> Option<(&'a TokenRange, &'a TokenRange)> {
    let mut all: Vec<(Token, Option<Token>, usize)> = Vec::with_capacity(ranges.len() + 1);
    for (i, (_, r)) in ranges.iter().enumerate() {
        all.extend(pieces(p, r).into_iter().flatten().map(|(l, r)| (l, r, i)));
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    // Per group: the piece before with the largest right bound (None = the ring's end).
    let groups = ranges.iter().map(|(g, _)| g + 1).max().unwrap_or(0);
    let mut reach: Vec<Option<(Option<&Token>, usize)>> = vec![None; groups];
    let mut found: Option<(usize, usize)> = None;
    for (left, right, i) in &all {
        let g = ranges[*i].0;
        for (h, best) in reach.iter().enumerate() {
            if (across && h == g) || found.is_some() {
                continue;
            }
            if let Some((r, j)) = best {
                if *j != *i && r.is_none_or(|r| left < r) {
                    found = Some((*j.min(i), *j.max(i)));
                }
            }
        }
        if found.is_some() {
            break;
        }
        let further = match &reach[g] {
            None => true,
            Some((None, _)) => false,
            Some((Some(r), _)) => right.as_ref().is_none_or(|x| x > *r),
        };
        if further {
            reach[g] = Some((right.as_ref(), *i));
        }
    }
    found.map(|(a, b)| (ranges[a].1, ranges[b].1))
}

/// Checks explicit boundaries: strictly increasing, no minimum token (which no key has).
pub fn validate_boundaries(p: Partitioner, b: &[Token]) -> Result<(), String> {
    if b.is_empty() {
        return Err("no token boundaries given".into());
    }
    for w in b.windows(2) {
        if w[0] >= w[1] {
            return Err(format!(
                "token boundaries must be strictly increasing: {} is not below {}",
                w[0], w[1]
            ));
        }
    }
    if b[0] == p.min_token() {
        return Err(format!(
            "boundary {} is the partitioner's minimum token; no key sorts at or below it",
            b[0]
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(v: i64) -> Token {
        Token::Murmur3(v)
    }

    #[test]
    fn triples_follow_cassandra_invariants() {
        let u = [7u8; 16];
        let r = RepairedRanges {
            full: vec![],
            transient: vec![],
            session: RepairSession::Pending(u),
        };
        for l in [Label::Full, Label::Transient, Label::Unrepaired] {
            r.triple(l).validate().unwrap();
        }
        assert!(r.triple(Label::Transient).is_transient);
        let bad = RepairTriple {
            repaired_at: 5,
            pending_repair: Some(u),
            is_transient: false,
        };
        assert!(bad.validate().is_err());
        let bad = RepairTriple {
            repaired_at: 0,
            pending_repair: None,
            is_transient: true,
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn rejects_transient_with_repaired_at_and_overlaps() {
        let p = Partitioner::Murmur3;
        let r = RepairedRanges {
            full: vec![TokenRange::new(m(0), m(10))],
            transient: vec![TokenRange::new(m(5), m(20))],
            session: RepairSession::Pending([1; 16]),
        };
        assert!(r.validate(p).unwrap_err().contains("overlap"));
        let r = RepairedRanges {
            full: vec![TokenRange::new(m(0), m(10))],
            transient: vec![TokenRange::new(m(10), m(20))],
            session: RepairSession::RepairedAt(1),
        };
        assert!(r.validate(p).unwrap_err().contains("pending-repair"));
        let ok = RepairedRanges {
            session: RepairSession::Pending([1; 16]),
            ..r
        };
        ok.validate(p).unwrap();
        // Wrapping ranges intersect across the ring's end.
        let intersect =
            |a: TokenRange, b: TokenRange| first_overlap(p, &[(0, &a), (1, &b)], true).is_some();
        assert!(intersect(
            TokenRange::new(m(100), m(-100)),
            TokenRange::new(m(-200), m(-150))
        ));
        assert!(!intersect(
            TokenRange::new(m(100), m(-100)),
            TokenRange::new(m(-100), m(100))
        ));
    }

    #[test]
    fn owned_ranges_must_be_given_and_disjoint() {
        let p = Partitioner::Murmur3;
        let none = OwnedRanges { ranges: vec![] };
        assert!(none.validate(p).unwrap_err().contains("no owned ranges"));
        let overlap = OwnedRanges {
            ranges: vec![
                TokenRange::new(m(0), m(10)),
                TokenRange::new(m(100), m(-100)),
                TokenRange::new(m(5), m(20)),
            ],
        };
        assert!(overlap.validate(p).unwrap_err().contains("overlap"));
        let wrap = OwnedRanges {
            ranges: vec![
                TokenRange::new(m(100), m(-100)),
                TokenRange::new(m(-150), m(-120)),
            ],
        };
        assert!(wrap.validate(p).unwrap_err().contains("overlap"));
        let ok = OwnedRanges {
            ranges: vec![TokenRange::new(m(0), m(10)), TokenRange::new(m(10), m(20))],
        };
        ok.validate(p).unwrap();
        assert!(ok.contains(p, &m(10)) && ok.contains(p, &m(20)));
        assert!(!ok.contains(p, &m(0)) && !ok.contains(p, &m(21)));
        assert_eq!(ok.bounds(), vec![m(0), m(10), m(20)]);
    }

    /// The sorted sweep against the definition: two ranges overlap when some token lies in
    /// both. With bounds in -6..=6 (and the minimum), every intersection holds its right
    /// bound, so the tokens -6..=6 and the maximum decide it.
    #[test]
    fn overlap_sweep_agrees_with_every_pair() {
        let p = Partitioner::Murmur3;
        let bounds: Vec<i64> = (-6..=6).chain([i64::MIN]).collect();
        let probe: Vec<Token> = (-6..=6).chain([i64::MAX]).map(m).collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..20_000 {
            let n = 1 + next(5);
            let rs: Vec<(usize, TokenRange)> = (0..n)
                .map(|_| {
                    let r = TokenRange::new(
                        m(bounds[next(bounds.len())]),
                        m(bounds[next(bounds.len())]),
                    );
                    (next(2), r)
                })
                .collect();
            let across = next(2) == 1;
            let shares = |a: &TokenRange, b: &TokenRange| {
                probe.iter().any(|t| a.contains(p, t) && b.contains(p, t))
            };
            let expected = (0..n).any(|i| {
                (i + 1..n).any(|j| (!across || rs[i].0 != rs[j].0) && shares(&rs[i].1, &rs[j].1))
            });
            let tagged: Vec<(usize, &TokenRange)> = rs.iter().map(|(g, r)| (*g, r)).collect();
            let got = first_overlap(p, &tagged, across);
            assert_eq!(got.is_some(), expected, "{rs:?} across={across}");
            if let Some((a, b)) = got {
                assert!(shares(a, b), "{a:?} {b:?} reported, but share no token");
            }
        }
    }

    #[test]
    fn boundaries_must_increase() {
        let p = Partitioner::Murmur3;
        assert!(validate_boundaries(p, &[m(1), m(1)]).is_err());
        assert!(validate_boundaries(p, &[m(2), m(1)]).is_err());
        assert!(validate_boundaries(p, &[m(i64::MIN)]).is_err());
        validate_boundaries(p, &[m(-5), m(7)]).unwrap();
    }
}

//! The ranges a node owns, from the management API's view of the ring: the local endpoint
//! of `/api/v0/metadata/endpoints` (`IS_LOCAL`, `ENDPOINT_IP`) and the replicas of each range
//! of `/api/v2/tokens/rangetoendpoint` (`StorageService.getRangeToAddressMap` of the
//! keyspace: RF and strategy already applied).
//!
//! Cleanup must never run on a ring in motion: a joining, leaving or moving node changes
//! which ranges this node keeps, and Cassandra's own cleanup refuses then as well
//! (CASSANDRA-16418, `StorageService.forceKeyspaceCleanup`: "Node is involved in cluster
//! membership changes"). So any endpoint whose gossip `STATUS` is not `NORMAL` makes the
//! ring "changing".

use std::collections::BTreeMap;

use super::RangeEndpoints;
use crate::reason::{Failure, Reason};

/// `(start, end]` in Murmur3 tokens (the endpoint parses tokens as `Long`).
pub type Range = (i64, i64);

/// The ranges of `ring` whose replicas include the local endpoint of `endpoints`, in ring
/// order, adjacent ones merged. Refuses a ring with an endpoint that is not `NORMAL`.
pub fn owned_ranges(
    endpoints: &[BTreeMap<String, String>],
    ring: &[RangeEndpoints],
) -> Result<Vec<Range>, Failure> {
    let me = settled_local(endpoints)?;
    let mut owned: Vec<Range> = Vec::new();
    for r in ring {
        let (start, end) = bounds(r)?;
        // Replicas are `ip` or `ip:port` (Cassandra 4.0+ with_port addresses).
        let mine = r.endpoints.iter().any(|e| {
            e == me
                || e.rsplit_once(':')
                    .is_some_and(|(ip, _)| ip.trim_matches(['[', ']']) == me)
        });
        if mine {
            // The range that wraps past the largest token: (start, MAX] and (MIN, end].
            if start >= end {
                owned.push((start, i64::MAX));
                if end != i64::MIN {
                    owned.push((i64::MIN, end));
                }
            } else {
                owned.push((start, end));
            }
        }
    }
    owned.sort();
    let mut merged: Vec<Range> = Vec::with_capacity(owned.len());
    for (s, e) in owned {
        match merged.last_mut() {
            Some(last) if last.1 == s => last.1 = e,
            _ => merged.push((s, e)),
        }
    }
    Ok(merged)
}

/// Every token of the ring (the bounds of its ranges), sorted, without `MIN` (no range
/// ends below it): a repair's ranges are unions of the ring's ranges, so an sstable cut at
/// these tokens lies wholly inside or wholly outside any of them. Refuses a changing ring
/// like [`owned_ranges`]: tokens of a ring in motion are not the next repair's.
pub fn ring_tokens(
    endpoints: &[BTreeMap<String, String>],
    ring: &[RangeEndpoints],
) -> Result<Vec<i64>, Failure> {
    settled_local(endpoints)?;
    let mut tokens = Vec::with_capacity(ring.len() * 2);
    for r in ring {
        let (start, end) = bounds(r)?;
        tokens.extend([start, end]);
    }
    tokens.retain(|t| *t != i64::MIN);
    tokens.sort_unstable();
    tokens.dedup();
    Ok(tokens)
}

fn bounds(r: &RangeEndpoints) -> Result<Range, Failure> {
    match r.tokens[..] {
        [start, end] => Ok((start, end)),
        _ => Err(Failure::new(
            Reason::ManagementApiFailed,
            format!(
                "/api/v2/tokens/rangetoendpoint: a range with {} tokens; expected 2",
                r.tokens.len()
            ),
        )),
    }
}

/// The local endpoint's address, once every endpoint is `NORMAL`.
fn settled_local(endpoints: &[BTreeMap<String, String>]) -> Result<&str, Failure> {
    let changing: Vec<String> = endpoints
        .iter()
        .filter(|e| {
            let status = e.get("STATUS").map(String::as_str).unwrap_or("");
            status.split(',').next() != Some("NORMAL")
        })
        .map(|e| {
            format!(
                "{} is {}",
                e.get("ENDPOINT_IP").map(String::as_str).unwrap_or("?"),
                e.get("STATUS")
                    .map(String::as_str)
                    .unwrap_or("without STATUS")
            )
        })
        .collect();
    if !changing.is_empty() {
        return Err(Failure::new(
            Reason::RingChanging,
            format!("the ring is changing ({}): a node's ownership is not settled until every endpoint is NORMAL; nothing was done", changing.join(", ")),
        ));
    }
    let local: Vec<&str> = endpoints
        .iter()
        .filter(|e| e.get("IS_LOCAL").is_some_and(|v| v == "true"))
        .filter_map(|e| e.get("ENDPOINT_IP").map(String::as_str))
        .collect();
    let [me] = local[..] else {
        return Err(Failure::new(
            Reason::ManagementApiFailed,
            format!("/api/v0/metadata/endpoints names {} local endpoints (IS_LOCAL=true with ENDPOINT_IP); expected one", local.len()),
        ));
    };
    Ok(me)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(ip: &str, status: &str, local: bool) -> BTreeMap<String, String> {
        [
            ("ENDPOINT_IP", ip),
            ("STATUS", status),
            ("IS_LOCAL", if local { "true" } else { "false" }),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn r(a: i64, b: i64, eps: &[&str]) -> RangeEndpoints {
        RangeEndpoints {
            tokens: vec![a, b],
            endpoints: eps.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_local_replica_ranges_merged() {
        let eps = [
            ep("10.0.0.1", "NORMAL,-5", true),
            ep("10.0.0.2", "NORMAL,5", false),
        ];
        let ring = [
            r(5, 100, &["10.0.0.2"]),
            r(-100, -5, &["10.0.0.1:7000"]),
            r(-5, 5, &["10.0.0.1", "10.0.0.2"]),
        ];
        assert_eq!(
            owned_ranges(&eps, &ring).expect("normal ring"),
            vec![(-100, 5)]
        );
        // The wrapping range splits at the ends of the ring.
        let ring = [r(100, -100, &["10.0.0.1"]), r(-100, 100, &["10.0.0.2"])];
        assert_eq!(
            owned_ranges(&eps, &ring).expect("wrap"),
            vec![(i64::MIN, -100), (100, i64::MAX)]
        );
    }

    #[test]
    fn ring_tokens_are_every_bound_sorted_without_min() {
        let eps = [
            ep("10.0.0.1", "NORMAL,-5", true),
            ep("10.0.0.2", "NORMAL,5", false),
        ];
        let ring = [
            r(100, i64::MIN, &["10.0.0.2"]),
            r(-5, 5, &["10.0.0.2"]),
            r(i64::MIN, -5, &["10.0.0.1"]),
            r(5, 100, &["10.0.0.1"]),
        ];
        assert_eq!(ring_tokens(&eps, &ring).expect("ring"), vec![-5, 5, 100]);
        let moving = [
            ep("10.0.0.1", "NORMAL,-5", true),
            ep("10.0.0.2", "MOVING,5", false),
        ];
        assert_eq!(
            ring_tokens(&moving, &ring).expect_err("moving").reason,
            Reason::RingChanging
        );
        let bad = [RangeEndpoints {
            tokens: vec![1],
            endpoints: vec![],
        }];
        assert_eq!(
            ring_tokens(&eps, &bad).expect_err("one token").reason,
            Reason::ManagementApiFailed
        );
    }

    #[test]
    fn a_joining_or_leaving_endpoint_is_ring_changing() {
        for s in ["BOOT,3", "LEAVING,3", "MOVING,3", ""] {
            let eps = [ep("10.0.0.1", "NORMAL,-5", true), ep("10.0.0.3", s, false)];
            let f = owned_ranges(&eps, &[]).expect_err(s);
            assert_eq!(f.reason, Reason::RingChanging, "{s}");
            assert!(f.message.contains("10.0.0.3"), "{}", f.message);
        }
    }

    #[test]
    fn no_local_endpoint_is_refused() {
        let eps = [ep("10.0.0.1", "NORMAL,-5", false)];
        assert_eq!(
            owned_ranges(&eps, &[]).expect_err("no local").reason,
            Reason::ManagementApiFailed
        );
    }
}

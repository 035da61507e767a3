//! A test ring for the management API stand-in (`mgmt.rs`): 48 evenly spaced tokens over
//! `nodes` nodes, RF 1; node `i` is 10.0.0.`i+1`. Cassandra's ranges are `(l, r]`: the
//! range ending at a token belongs to the node holding that token.

use serde_json::{json, Value};

/// Node `i`'s address.
pub fn ip(i: usize) -> String {
    format!("10.0.0.{}", i + 1)
}

/// The ranges with the index of their replica, in ring order.
pub fn ranges(nodes: usize) -> Vec<(i64, i64, usize)> {
    let n = 48i64;
    let step = (u64::MAX / n as u64) as i64;
    let tokens: Vec<i64> = (0..n).map(|i| i64::MIN + 1 + i * step).collect();
    (0..tokens.len())
        .map(|i| (tokens[i], tokens[(i + 1) % tokens.len()], (i + 1) % nodes))
        .collect()
}

/// The ranges of node `node`, as non-wrapping `(l, r]` ranges (the range that wraps past
/// the largest token is split in two).
pub fn owned(nodes: usize, node: usize) -> Vec<(i64, i64)> {
    let mut v = Vec::new();
    for (l, r, n) in ranges(nodes) {
        if n == node {
            if l < r {
                v.push((l, r));
            } else {
                v.push((l, i64::MAX));
                v.push((i64::MIN, r));
            }
        }
    }
    v.sort();
    v
}

/// The ring as node `local`'s management API shows it. `rack` names a node's rack (no
/// `RACK` field when `None`); `joining` adds one more endpoint in `BOOT` state, owning no
/// range yet, as while a node bootstraps.
pub fn ring_json(
    nodes: usize,
    local: usize,
    rack: Option<&dyn Fn(usize) -> &'static str>,
    joining: bool,
) -> String {
    let endpoint = |i: usize, status: &str| {
        let mut e = json!({"ENDPOINT_IP": ip(i), "STATUS": format!("{status},{}", i + 1),
                           "IS_LOCAL": if i == local { "true" } else { "false" }, "DC": "dc1"});
        if let Some(rack) = rack {
            e["RACK"] = json!(rack(i));
        }
        e
    };
    let mut endpoints: Vec<Value> = (0..nodes).map(|i| endpoint(i, "NORMAL")).collect();
    if joining {
        endpoints.push(endpoint(nodes, "BOOT"));
    }
    let ranges: Vec<Value> = ranges(nodes)
        .iter()
        .map(|(l, r, n)| json!({"tokens": [l, r], "endpoints": [ip(*n)]}))
        .collect();
    json!({"endpoints": endpoints, "ranges": ranges, "keyspaces": ["ks"]}).to_string()
}

//! Wired to scale-ups (opt-in): a CassandraDatacenter labelled
//! `cleave.dev/cleanup-after-scale-up: "true"` and annotated
//! `cassandra.datastax.com/no-cleanup` (so that cass-operator does not run its own rewrite,
//! `ReconciliationContext.cleanupAfterScaling`) gets a DatacenterCleanup each time its
//! `ScalingUp` condition turns False again: the same moment cass-operator would have
//! created its CassandraTask `cleanup`. One per transition: the resource's name carries the
//! condition's lastTransitionTime, so a second look (a restart of this controller, a
//! re-list) finds it made.

use std::collections::BTreeMap;

use kube::api::{DynamicObject, ObjectMeta};
use kube::{Resource, ResourceExt};

use super::crd::{DatacenterCleanup, DatacenterCleanupSpec, RackRestart};

pub const OPT_IN_LABEL: &str = "cleave.dev/cleanup-after-scale-up";
/// cass-operator's `NoAutomatedCleanupAnnotation` (any value; `HasAnnotation`).
pub const NO_CLEANUP: &str = "cassandra.datastax.com/no-cleanup";
/// The keyspaces to clean up, comma-separated (required: cleave does not guess which
/// keyspaces hold data worth cleaning; system keyspaces are local or replicated everywhere).
pub const KEYSPACES: &str = "cleave.dev/cleanup-keyspaces";
/// `CassandraTask` (restart each staged rack) or `None` (default: published at the
/// nodes' next restart, whenever that is).
pub const RESTART: &str = "cleave.dev/cleanup-restart";
/// `maxConcurrentNodes` of the cleanup (default 1).
pub const CONCURRENCY: &str = "cleave.dev/cleanup-max-concurrent-nodes";

/// What the datacenter asks for now: nothing, a cleanup (not yet made, perhaps), or a
/// reason it cannot have one (an Event says it).
#[derive(Debug)]
pub enum Wanted {
    Nothing,
    Cleanup(Box<DatacenterCleanup>),
    Refused(String),
}

pub fn wanted(dc: &DynamicObject) -> Wanted {
    if dc.labels().get(OPT_IN_LABEL).map(String::as_str) != Some("true") {
        return Wanted::Nothing;
    }
    let scaling_up = dc.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "ScalingUp")
        .cloned();
    // Only a ScalingUp that was True once and is False now: a datacenter that never
    // scaled up has no condition at all.
    let Some(c) = scaling_up else {
        return Wanted::Nothing;
    };
    if c["status"] != "False" {
        return Wanted::Nothing;
    }
    let Some(at) = c["lastTransitionTime"]
        .as_str()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
    else {
        return Wanted::Nothing;
    };
    let ann = dc.annotations();
    if !ann.contains_key(NO_CLEANUP) {
        return Wanted::Refused(format!(
            "{OPT_IN_LABEL} is set but {NO_CLEANUP} is not: cass-operator runs its own cleanup after this scale-up; cleave stays out"
        ));
    }
    let keyspaces: Vec<String> = ann
        .get(KEYSPACES)
        .map(|k| {
            k.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if keyspaces.is_empty() {
        return Wanted::Refused(format!(
            "{OPT_IN_LABEL} is set but {KEYSPACES} names no keyspace"
        ));
    }
    let restart = match ann.get(RESTART).map(String::as_str) {
        None | Some("None") => RackRestart::None,
        Some("CassandraTask") => RackRestart::CassandraTask,
        Some(other) => {
            return Wanted::Refused(format!(
                "{RESTART}: {other:?} is neither None nor CassandraTask"
            ))
        }
    };
    let max_concurrent_nodes = match ann.get(CONCURRENCY).map(|v| v.parse::<u32>()) {
        None => None,
        Some(Ok(n)) if n >= 1 => Some(n),
        Some(_) => {
            return Wanted::Refused(format!("{CONCURRENCY}: not a whole number of at least 1"))
        }
    };
    let name = format!("{}-scale-up-{}", dc.name_any(), at.as_second());
    let mut dcc = DatacenterCleanup::new(
        &name,
        DatacenterCleanupSpec {
            datacenter: Some(dc.name_any()),
            keyspaces,
            restart,
            max_concurrent_nodes,
            ..Default::default()
        },
    );
    dcc.metadata = ObjectMeta {
        name: Some(name),
        namespace: dc.namespace(),
        labels: Some(BTreeMap::from([(
            super::controller::DC_LABEL.to_string(),
            dc.name_any(),
        )])),
        // Owned by the datacenter: deleting it deletes its cleanups (and they withdraw).
        owner_references: dc.meta().uid.clone().map(|uid| {
            vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "cassandra.datastax.com/v1beta1".into(),
                    kind: "CassandraDatacenter".into(),
                    name: dc.name_any(),
                    uid,
                    ..Default::default()
                },
            ]
        }),
        ..Default::default()
    };
    Wanted::Cleanup(Box::new(dcc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dc(
        labels: serde_json::Value,
        ann: serde_json::Value,
        conds: serde_json::Value,
    ) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cassandra.datastax.com/v1beta1",
            "kind": "CassandraDatacenter",
            "metadata": {"name": "dc1", "namespace": "cass", "uid": "u-1",
                         "labels": labels, "annotations": ann},
            "status": {"conditions": conds},
        }))
        .unwrap()
    }

    const T: &str = "2026-12-07T01:00:00Z";

    #[test]
    fn datacenter_scale_up_end_makes_one_cleanup_named_by_the_transition() {
        let d = dc(
            json!({OPT_IN_LABEL: "true"}),
            json!({NO_CLEANUP: "true", KEYSPACES: "ks1, ks2", RESTART: "CassandraTask"}),
            json!([{"type": "ScalingUp", "status": "False", "lastTransitionTime": T}]),
        );
        let Wanted::Cleanup(c) = wanted(&d) else {
            panic!("{:?}", wanted(&d))
        };
        let secs = T
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
            .as_second();
        assert_eq!(c.name_any(), format!("dc1-scale-up-{secs}"));
        assert_eq!(c.spec.keyspaces, ["ks1", "ks2"]);
        assert_eq!(c.spec.restart, RackRestart::CassandraTask);
        assert_eq!(c.spec.datacenter.as_deref(), Some("dc1"));
        assert_eq!(c.owner_references()[0].uid, "u-1");
    }

    #[test]
    fn datacenter_scale_up_needs_the_label_the_annotation_and_an_ended_scale_up() {
        let ended = json!([{"type": "ScalingUp", "status": "False", "lastTransitionTime": T}]);
        let ok_ann = json!({NO_CLEANUP: "", KEYSPACES: "ks"});
        assert!(matches!(
            wanted(&dc(json!({}), ok_ann.clone(), ended.clone())),
            Wanted::Nothing
        ));
        let running = json!([{"type": "ScalingUp", "status": "True", "lastTransitionTime": T}]);
        let on = json!({OPT_IN_LABEL: "true"});
        assert!(matches!(
            wanted(&dc(on.clone(), ok_ann.clone(), running)),
            Wanted::Nothing
        ));
        assert!(matches!(
            wanted(&dc(on.clone(), ok_ann.clone(), json!([]))),
            Wanted::Nothing
        ));
        assert!(
            matches!(wanted(&dc(on.clone(), json!({KEYSPACES: "ks"}), ended.clone())), Wanted::Refused(m) if m.contains(NO_CLEANUP))
        );
        assert!(
            matches!(wanted(&dc(on.clone(), json!({NO_CLEANUP: ""}), ended.clone())), Wanted::Refused(m) if m.contains(KEYSPACES))
        );
        assert!(
            matches!(wanted(&dc(on, json!({NO_CLEANUP: "", KEYSPACES: "ks", RESTART: "Always"}), ended)), Wanted::Refused(m) if m.contains("Always"))
        );
    }
}

//! Which regions each stage covers: names as listed, or a label selector over Region
//! objects (matchLabels and matchExpressions, as Kubernetes evaluates them).
//!
//! A region covered by two stages belongs to the first: it is rolled out once. A name
//! that matches no Region object is still selected (it resolves later, or never, in which
//! case the stage's progress deadline applies): a missing region is not a spec error.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::api::ConfigRolloutSpec;

use super::observations::RegionObservation;
use super::tenancy::Grant;

/// The regions of each stage, in spec order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagePlan<'a> {
    /// Per stage (same index as `spec.stages`), its regions in rollout order.
    pub stages: Vec<Vec<&'a str>>,
}

impl StagePlan<'_> {
    /// Every selected region, stage by stage.
    pub fn all_regions(&self) -> impl Iterator<Item = (usize, &str)> + '_ {
        self.stages
            .iter()
            .enumerate()
            .flat_map(|(index, regions)| regions.iter().map(move |region| (index, *region)))
    }

    /// Total number of selected regions.
    pub fn region_count(&self) -> usize {
        self.stages.iter().map(Vec::len).sum()
    }
}

/// Resolves every stage's regions against the observed Region objects. Only regions the
/// grant allows are ever selected: a selector matches among them, and a name outside it
/// (refused by [`Grant::check`]) is dropped.
pub fn plan<'a>(
    spec: &'a ConfigRolloutSpec,
    regions: &'a [RegionObservation],
    grant: &Grant,
) -> StagePlan<'a> {
    // Sized up front: growing a hash set rehashes every name taken so far, and this runs
    // on every step.
    let mut taken: HashSet<&str> = HashSet::with_capacity(
        regions.len().max(
            spec.stages
                .iter()
                .map(|stage| stage.regions.names.len())
                .sum(),
        ),
    );
    let mut stages = Vec::with_capacity(spec.stages.len());
    for stage in &spec.stages {
        let candidates: Vec<&'a str> = match &stage.regions.selector {
            Some(selector) if stage.regions.names.is_empty() => {
                let mut matched: Vec<&str> = regions
                    .iter()
                    .filter(|region| selector_matches(selector, &region.labels))
                    .map(|region| region.name.as_str())
                    .collect();
                matched.sort_unstable();
                matched
            }
            _ => stage.regions.names.iter().map(String::as_str).collect(),
        };
        let mut selected = Vec::with_capacity(candidates.len());
        for name in candidates {
            if grant.allows_region(name) && taken.insert(name) {
                selected.push(name);
            }
        }
        stages.push(selected);
    }
    StagePlan { stages }
}

/// Whether `labels` satisfy a Kubernetes label selector. An empty selector matches
/// everything; an unknown operator matches nothing (and is reported by `validate`).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    labels_match
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|requirement| requirement_matches(requirement, labels))
}

fn requirement_matches(
    requirement: &LabelSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> bool {
    let value = labels.get(&requirement.key);
    let values = requirement.values.as_deref().unwrap_or_default();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|value| values.contains(value)),
        "NotIn" => value.is_none_or(|value| !values.contains(value)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

/// Whether a selector requirement is well formed (operator known, values as required).
pub fn requirement_is_valid(requirement: &LabelSelectorRequirement) -> bool {
    let has_values = requirement
        .values
        .as_ref()
        .is_some_and(|values| !values.is_empty());
    match requirement.operator.as_str() {
        "In" | "NotIn" => has_values,
        "Exists" | "DoesNotExist" => !has_values,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let eu = labels(&[("geo", "eu"), ("tier", "canary")]);
        let us = labels(&[("geo", "us")]);
        let by_labels = LabelSelector {
            match_labels: Some(labels(&[("geo", "eu")])),
            match_expressions: None,
        };
        assert!(selector_matches(&by_labels, &eu));
        assert!(!selector_matches(&by_labels, &us));

        let cases = [
            (requirement("geo", "In", &["eu", "ap"]), true, false),
            (requirement("geo", "NotIn", &["eu"]), false, true),
            (requirement("tier", "Exists", &[]), true, false),
            (requirement("tier", "DoesNotExist", &[]), false, true),
            (requirement("tier", "NotIn", &["canary"]), false, true),
            (requirement("geo", "Gt", &["1"]), false, false),
        ];
        for (requirement, eu_expected, us_expected) in cases {
            let selector = LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![requirement.clone()]),
            };
            assert_eq!(
                selector_matches(&selector, &eu),
                eu_expected,
                "{requirement:?}"
            );
            assert_eq!(
                selector_matches(&selector, &us),
                us_expected,
                "{requirement:?}"
            );
        }
        assert!(selector_matches(&LabelSelector::default(), &us));
    }

    #[test]
    fn requirement_validity_matches_the_operator() {
        assert!(requirement_is_valid(&requirement("a", "In", &["x"])));
        assert!(!requirement_is_valid(&requirement("a", "In", &[])));
        assert!(requirement_is_valid(&requirement("a", "Exists", &[])));
        assert!(!requirement_is_valid(&requirement("a", "Exists", &["x"])));
        assert!(!requirement_is_valid(&requirement("a", "Like", &["x"])));
    }
}

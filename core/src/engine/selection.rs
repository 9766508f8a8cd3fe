//! Which regions each stage covers: names as listed, or a label selector over Region
//! objects (matchLabels and matchExpressions, as Kubernetes evaluates them).
//!
//! A region covered by two stages belongs to the first: it is rolled out once. A name
//! that matches no Region object is still selected (it resolves later, or never, in which
//! case the stage's progress deadline applies): a missing region is not a spec error.

use std::collections::HashSet;

use kube::core::SelectorExt;

use configrollout_api::ConfigRolloutSpec;

use super::label_selector::selector;
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
                // An invalid selector selects no region: `validate` reports it (naming the
                // field) as InvalidSpec, and matching more than asked would roll out where
                // nobody meant to.
                let mut matched: Vec<&str> = match self::selector(selector) {
                    Ok(selector) => regions
                        .iter()
                        .filter(|region| selector.matches(&region.labels))
                        .map(|region| region.name.as_str())
                        .collect(),
                    Err(_) => Vec::new(),
                };
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

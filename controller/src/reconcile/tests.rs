use std::collections::BTreeMap;

use super::*;

/// A Region labelled `tier`, for the selection tests of this module.
pub(crate) fn region(name: &str, tier: &str) -> crate::api::Region {
    let mut region = crate::api::Region::new(name, Default::default());
    region.metadata.labels = Some([("tier".to_owned(), tier.to_owned())].into());
    region
}

/// A one-stage rollout `team/limits` whose status names `revision`, complete.
pub(crate) fn rollout(revision: Option<&str>) -> ConfigRollout {
    let mut rollout = ConfigRollout::new(
        "limits",
        serde_json::from_value(serde_json::json!({
            "target": {"namespace": "app", "name": "limits"},
            "data": {"k": "v"},
            "stages": [{"name": "all", "regions": {"names": ["eu-1"]}}],
        }))
        .unwrap(),
    );
    rollout.metadata.namespace = Some("team".to_owned());
    rollout.status = Some(crate::api::ConfigRolloutStatus {
        revision: revision.map(str::to_owned),
        stable_revision: revision.map(str::to_owned),
        ..Default::default()
    });
    rollout
}

fn data(keys: usize, fill: char) -> BTreeMap<String, String> {
    (0..keys)
        .map(|key| (format!("key-{key:04}"), fill.to_string().repeat(1000)))
        .collect()
}

#[test]
fn a_revision_whose_state_and_replaced_values_do_not_fit_is_refused_before_any_write() {
    let writer = WriterId::rollout("team", "limits").unwrap();
    let now = Utc::now();
    let stamp = Stamp::new(1_000, 0, writer.clone());
    let r1 = RevisionState::declare("r1", None, None, &data(600, 'a'), stamp);
    let revisions = BTreeMap::from([("r1".to_owned(), r1)]);

    // Every value replaced: 600 KB of state plus 600 KB of previous values.
    let error = oversized_revision(
        &rollout(Some("r1")),
        &revisions,
        &data(600, 'b'),
        &writer,
        now,
    )
    .expect("refused");
    assert!(
        error.starts_with("spec.data: the next revision cannot be stored"),
        "{error}"
    );
    assert!(!error.contains("bbbb"), "no value in the message: {error}");

    // Half of them: fits.
    let mut half = data(600, 'a');
    half.extend(data(300, 'b'));
    assert_eq!(
        oversized_revision(&rollout(Some("r1")), &revisions, &half, &writer, now),
        None
    );
    // Nothing new to declare: nothing to check.
    assert_eq!(
        oversized_revision(
            &rollout(Some("r1")),
            &revisions,
            &data(600, 'a'),
            &writer,
            now
        ),
        None
    );
}

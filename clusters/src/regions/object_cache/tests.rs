use super::*;

fn config_map(name: &str, uid: &str, version: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("app".to_owned()),
            uid: Some(uid.to_owned()),
            resource_version: Some(version.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([("rate".to_owned(), value.to_owned())].into()),
        ..ConfigMap::default()
    }
}

fn version(uid: &str, resource_version: &str) -> ObjectVersion {
    ObjectVersion {
        uid: uid.to_owned(),
        resource_version: resource_version.to_owned(),
    }
}

fn changed(name: &str, version: Option<ObjectVersion>) -> WatchEvent {
    WatchEvent::Changed {
        name: name.to_owned(),
        version,
    }
}

fn listed(entries: &[(&str, &str, &str)]) -> WatchEvent {
    WatchEvent::Listed(
        entries
            .iter()
            .map(|(name, uid, rv)| ((*name).to_owned(), version(uid, rv)))
            .collect(),
    )
}

#[test]
fn nothing_is_known_before_the_watch_has_listed() {
    let kept = KeptObjects::default();
    let versions = Arc::new(NamespaceVersions::default());
    let objects = RegionObjects::new(&kept, "region-1", "app", Some(versions.clone()));
    objects.saw("limits", Some(&config_map("limits", "u1", "5", "10")));
    assert_eq!(objects.current("limits"), None);
    assert_eq!(objects.current("other"), None);
    // Nor is anything kept meanwhile: it may never list (RBAC without list/watch).
    assert_eq!(kept.size(), (0, 0));
    versions.apply(listed(&[("limits", "u1", "5")]));
    assert_eq!(objects.current("limits"), None);
    objects.saw("limits", Some(&config_map("limits", "u1", "5", "10")));
    assert_eq!(
        objects.current("limits"),
        Some(Known::Present(Box::new(config_map(
            "limits", "u1", "5", "10"
        ))))
    );
    assert_eq!(objects.current("other"), Some(Known::Absent));
    // Without a watch at all, every read goes to the region.
    let unwatched = RegionObjects::new(&kept, "region-1", "app", None);
    assert_eq!(unwatched.current("limits"), None);
}

#[test]
fn a_kept_object_answers_only_at_the_version_the_watch_names() {
    let kept = KeptObjects::default();
    let versions = Arc::new(NamespaceVersions::default());
    versions.apply(listed(&[("limits", "u1", "5")]));
    let objects = RegionObjects::new(&kept, "region-1", "app", Some(versions.clone()));
    // Never read: the region is asked.
    assert_eq!(objects.current("limits"), None);
    objects.saw("limits", Some(&config_map("limits", "u1", "5", "10")));
    assert!(matches!(objects.current("limits"), Some(Known::Present(_))));
    // Someone else wrote it: the kept copy is no longer an answer.
    versions.apply(changed("limits", Some(version("u1", "6"))));
    assert_eq!(objects.current("limits"), None);
    // Deleted and created again at a version equal to the kept one: another object.
    versions.apply(changed("limits", Some(version("u2", "5"))));
    assert_eq!(objects.current("limits"), None);
    versions.apply(changed("limits", None));
    assert_eq!(objects.current("limits"), Some(Known::Absent));
}

#[test]
fn a_failed_watch_sends_reads_to_the_region_until_it_hears_again() {
    let kept = KeptObjects::default();
    let versions = Arc::new(NamespaceVersions::default());
    versions.apply(listed(&[("limits", "u1", "5")]));
    let objects = RegionObjects::new(&kept, "region-1", "app", Some(versions.clone()));
    objects.saw("limits", Some(&config_map("limits", "u1", "5", "10")));
    versions.apply(WatchEvent::Failed);
    assert_eq!(objects.current("limits"), None);
    assert_eq!(objects.current("other"), None);
    versions.apply(changed("other", Some(version("u9", "7"))));
    assert!(matches!(objects.current("limits"), Some(Known::Present(_))));
}

#[test]
fn a_write_answer_is_known_before_its_watch_event_arrives() {
    let kept = KeptObjects::default();
    let versions = Arc::new(NamespaceVersions::default());
    versions.apply(listed(&[]));
    let objects = RegionObjects::new(&kept, "region-1", "app", Some(versions.clone()));
    assert_eq!(objects.current("limits"), Some(Known::Absent));
    let created = config_map("limits", "u1", "8", "10");
    objects.saw("limits", Some(&created));
    assert_eq!(
        objects.current("limits"),
        Some(Known::Present(Box::new(created)))
    );
    // The watch's own event for that write changes nothing.
    versions.apply(changed("limits", Some(version("u1", "8"))));
    assert!(matches!(objects.current("limits"), Some(Known::Present(_))));
    // An older event arriving late costs a read, never a wrong answer.
    versions.apply(changed("limits", Some(version("u1", "7"))));
    assert_eq!(objects.current("limits"), None);
}

#[test]
fn regions_and_namespaces_are_kept_apart() {
    let kept = KeptObjects::default();
    let versions = Arc::new(NamespaceVersions::default());
    versions.apply(listed(&[("limits", "u1", "5")]));
    let one = RegionObjects::new(&kept, "region-1", "app", Some(versions.clone()));
    let two = RegionObjects::new(&kept, "region-2", "app", Some(versions.clone()));
    let other_namespace = RegionObjects::new(&kept, "region-1", "web", Some(versions));
    one.saw("limits", Some(&config_map("limits", "u1", "5", "10")));
    assert!(matches!(one.current("limits"), Some(Known::Present(_))));
    assert_eq!(two.current("limits"), None);
    assert_eq!(other_namespace.current("limits"), None);
    kept.forget_region("region-1");
    assert_eq!(one.current("limits"), None);
    assert_eq!(kept.size(), (0, 0));
}

#[test]
fn kept_objects_stay_within_their_byte_bound() {
    let kept = KeptObjects::default();
    let big = "x".repeat(MAX_KEPT_BYTES / 4);
    let key = |name: &str| ObjectKey {
        region: "region-1".to_owned(),
        namespace: "app".to_owned(),
        name: name.to_owned(),
    };
    for (index, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        kept.insert(key(name), &config_map(name, name, "1", &big));
        if index == 2 {
            // "a" used again: "b" goes first.
            assert!(kept.get(&key("a"), &version("a", "1")).is_some());
        }
    }
    assert!(kept.size().1 <= MAX_KEPT_BYTES);
    assert!(kept.get(&key("b"), &version("b", "1")).is_none());
    assert!(kept.get(&key("a"), &version("a", "1")).is_some());
    assert!(kept.get(&key("d"), &version("d", "1")).is_some());
}

#[test]
fn kept_objects_carry_no_managed_fields() {
    let kept = KeptObjects::default();
    let versions = Arc::new(NamespaceVersions::default());
    versions.apply(listed(&[("limits", "u1", "5")]));
    let objects = RegionObjects::new(&kept, "region-1", "app", Some(versions));
    let mut object = config_map("limits", "u1", "5", "10");
    object.metadata.managed_fields = Some(vec![Default::default()]);
    objects.saw("limits", Some(&object));
    let Some(Known::Present(found)) = objects.current("limits") else {
        panic!("kept object not found");
    };
    assert_eq!(found.metadata.managed_fields, None);
}

/// What wakes a rollout: a change this process did not already see from its own write's
/// answer, and what a listing after a gap shows changed or gone.
#[test]
fn changes_not_seen_from_this_process_are_named() {
    let kept = KeptObjects::default();
    let versions = Arc::new(NamespaceVersions::default());
    versions.apply(listed(&[("limits", "u1", "5"), ("other", "u2", "3")]));
    let objects = RegionObjects::new(&kept, "region-1", "app", Some(versions.clone()));
    assert!(objects.is_watched());

    // Our write's answer came first: its watch event is no news.
    objects.saw("limits", Some(&config_map("limits", "u1", "6", "11")));
    assert!(
        versions
            .apply(changed("limits", Some(version("u1", "6"))))
            .is_empty()
    );

    // A hand edit, and a deletion, are.
    assert_eq!(
        versions.apply(changed("limits", Some(version("u1", "7")))),
        [("limits".to_owned(), Some("7".to_owned()))]
    );
    assert_eq!(
        versions.apply(changed("other", None)),
        [("other".to_owned(), None)]
    );

    // A listing after a gap: what differs from before it (a restored object, a new one)
    // and what is gone.
    versions.apply(changed("gone", Some(version("u3", "8"))));
    let mut relisted = versions.apply(listed(&[("limits", "u1", "7"), ("other", "u9", "9")]));
    relisted.sort();
    assert_eq!(
        relisted,
        [
            ("gone".to_owned(), None),
            ("other".to_owned(), Some("9".to_owned())),
        ]
    );

    // A failed watch is no longer watched: its rollouts look at their usual pace.
    versions.apply(WatchEvent::Failed);
    assert!(!objects.is_watched());
}

/// A change whose answer this process kept after the watch's event is its own write.
#[test]
fn a_change_at_the_kept_version_was_made_here() {
    let kept = KeptObjects::default();
    let versions = Arc::new(NamespaceVersions::default());
    versions.apply(listed(&[]));
    let objects = RegionObjects::new(&kept, "region-1", "app", Some(versions));
    objects.saw("limits", Some(&config_map("limits", "u1", "6", "11")));
    let change = |version: Option<&str>| RegionChange {
        region: "region-1".to_owned(),
        namespace: "app".to_owned(),
        name: "limits".to_owned(),
        resource_version: version.map(str::to_owned),
    };
    assert!(kept.holds(&change(Some("6"))));
    assert!(!kept.holds(&change(Some("7"))));
    assert!(!kept.holds(&change(None)));
}

//! Label selectors over Region objects (and over a region's workloads): evaluated as
//! Kubernetes evaluates them, and refused, naming the field, when Kubernetes would refuse
//! them or when the API server's string form could not carry them unchanged.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::core::Selector;

/// Why a label selector cannot be evaluated, naming the field within the selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SelectorError {
    /// The offending field, relative to the selector, e.g. `matchExpressions[0]`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// `selector` as kube evaluates it: locally with [`SelectorExt::matches`], with Kubernetes
/// semantics (an empty selector matches everything). A requirement Kubernetes would refuse
/// is an error rather than being dropped: dropping it would widen the selection.
pub fn selector(selector: &LabelSelector) -> Result<Selector, SelectorError> {
    for (index, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        if !requirement_is_valid(requirement) {
            return Err(SelectorError {
                field: format!("matchExpressions[{index}]"),
                message: format!(
                    "operator `{}` on key `{}` is not In/NotIn with values or \
                     Exists/DoesNotExist without",
                    requirement.operator, requirement.key
                ),
            });
        }
    }
    // Cannot fail after the check above; mapped all the same rather than unwrapped.
    Selector::try_from(selector.clone()).map_err(|error| SelectorError {
        field: "matchExpressions".to_owned(),
        message: error.to_string(),
    })
}

/// [`selector`], for the API server (`ListParams::labels_from`). That form is a string
/// kube does not escape, so a key or value with a character labels cannot have (a comma,
/// `=`, `!`, a parenthesis, a space) would change its meaning, e.g. add a requirement;
/// such a selector is an error instead.
pub fn server_selector(selector: &LabelSelector) -> Result<Selector, SelectorError> {
    let key_error = |field: String, key: &str| SelectorError {
        field,
        message: format!("key `{key}` is not a label key"),
    };
    let value_error = |field: String, value: &str| SelectorError {
        field,
        message: format!("value `{value}` is not a label value"),
    };
    for (key, value) in selector.match_labels.iter().flatten() {
        if !is_label_key(key) {
            return Err(key_error(format!("matchLabels.{key}"), key));
        }
        if !is_label_value(value) {
            return Err(value_error(format!("matchLabels.{key}"), value));
        }
    }
    for (index, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        if !is_label_key(&requirement.key) {
            return Err(key_error(
                format!("matchExpressions[{index}].key"),
                &requirement.key,
            ));
        }
        for value in requirement.values.iter().flatten() {
            if !is_label_value(value) {
                return Err(value_error(
                    format!("matchExpressions[{index}].values"),
                    value,
                ));
            }
        }
    }
    self::selector(selector)
}

/// Only the characters a label key may hold (`[prefix/]name`); the API server checks the
/// rest of the shape when it parses the selector.
fn is_label_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'/'))
}

/// Only the characters a label value may hold; empty is a value.
fn is_label_value(value: &str) -> bool {
    value
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
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
    use std::collections::BTreeMap;

    use kube::core::SelectorExt;

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

    fn expressions(requirements: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: None,
            match_expressions: Some(requirements),
        }
    }

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let eu = labels(&[("geo", "eu"), ("tier", "canary")]);
        let us = labels(&[("geo", "us")]);
        let by_labels = selector(&LabelSelector {
            match_labels: Some(labels(&[("geo", "eu")])),
            match_expressions: None,
        })
        .unwrap();
        assert!(by_labels.matches(&eu));
        assert!(!by_labels.matches(&us));

        let cases = [
            (requirement("geo", "In", &["eu", "ap"]), true, false),
            (requirement("geo", "NotIn", &["eu"]), false, true),
            (requirement("tier", "Exists", &[]), true, false),
            (requirement("tier", "DoesNotExist", &[]), false, true),
            // NotIn matches a missing key, as Kubernetes does.
            (requirement("tier", "NotIn", &["canary"]), false, true),
        ];
        for (requirement, eu_expected, us_expected) in cases {
            let selector = selector(&expressions(vec![requirement.clone()])).unwrap();
            assert_eq!(selector.matches(&eu), eu_expected, "{requirement:?}");
            assert_eq!(selector.matches(&us), us_expected, "{requirement:?}");
        }

        // matchLabels and matchExpressions are ANDed.
        let both = selector(&LabelSelector {
            match_labels: Some(labels(&[("geo", "eu")])),
            match_expressions: Some(vec![requirement("tier", "DoesNotExist", &[])]),
        })
        .unwrap();
        assert!(!both.matches(&eu));
        assert!(!both.matches(&us));
        assert!(both.matches(&labels(&[("geo", "eu")])));
    }

    #[test]
    fn an_empty_selector_matches_everything() {
        let everything = selector(&LabelSelector::default()).unwrap();
        assert!(everything.selects_all());
        assert!(everything.matches(&labels(&[("geo", "us")])));
        assert!(everything.matches(&BTreeMap::new()));
        let empty_lists = selector(&LabelSelector {
            match_labels: Some(BTreeMap::new()),
            match_expressions: Some(Vec::new()),
        })
        .unwrap();
        assert!(empty_lists.matches(&BTreeMap::new()));
    }

    #[test]
    fn invalid_requirements_are_errors_naming_the_field() {
        let invalid = [
            requirement("geo", "Gt", &["1"]),
            requirement("geo", "In", &[]),
            requirement("geo", "NotIn", &[]),
            requirement("geo", "Exists", &["eu"]),
            requirement("geo", "DoesNotExist", &["eu"]),
        ];
        for bad in invalid {
            let error = selector(&expressions(vec![
                requirement("tier", "Exists", &[]),
                bad.clone(),
            ]))
            .unwrap_err();
            assert_eq!(error.field, "matchExpressions[1]", "{bad:?}");
            assert!(error.to_string().contains(&bad.operator), "{error}");
        }
        // kube itself takes an empty In list, which matches nothing and which the API
        // server refuses.
        let empty_in = LabelSelectorRequirement {
            values: Some(Vec::new()),
            ..requirement("geo", "In", &[])
        };
        assert!(selector(&expressions(vec![empty_in])).is_err());
    }

    #[test]
    fn server_selectors_say_the_same_and_refuse_what_a_string_cannot_carry() {
        let selector = server_selector(&LabelSelector {
            match_labels: Some(labels(&[("app.kubernetes.io/name", "api")])),
            match_expressions: Some(vec![
                requirement("geo", "In", &["eu", "ap"]),
                requirement("tier", "NotIn", &["canary"]),
                requirement("owner", "Exists", &[]),
                requirement("legacy", "DoesNotExist", &[]),
            ]),
        })
        .unwrap();
        assert_eq!(
            selector.to_string(),
            "app.kubernetes.io/name=api,geo in (ap,eu),tier notin (canary),owner,!legacy"
        );
        assert_eq!(
            server_selector(&LabelSelector::default())
                .unwrap()
                .to_string(),
            ""
        );

        // Each would read as a different selector on the server.
        let injected = [
            (
                LabelSelector {
                    match_labels: Some(labels(&[("app", "api,tier!=canary")])),
                    match_expressions: None,
                },
                "matchLabels.app",
            ),
            (
                LabelSelector {
                    match_labels: Some(labels(&[("app in (x),b", "y")])),
                    match_expressions: None,
                },
                "matchLabels.app in (x),b",
            ),
            (
                expressions(vec![requirement("geo", "In", &["eu),x in (y"])]),
                "matchExpressions[0].values",
            ),
            (
                expressions(vec![requirement("", "Exists", &[])]),
                "matchExpressions[0].key",
            ),
        ];
        for (selector, field) in injected {
            assert_eq!(server_selector(&selector).unwrap_err().field, field);
        }
        assert_eq!(
            server_selector(&expressions(vec![requirement("geo", "Gt", &["1"])]))
                .unwrap_err()
                .field,
            "matchExpressions[0]"
        );
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

//! A job gate's Job template (see `configrollout_api::JobCheck`): what makes one
//! runnable, and the walk that renders placeholders into its strings only, so that no
//! value changes the Job's shape.

/// Why a Job template is not a `batch/v1` JobSpec the controller can run.
pub fn job_problem(template: &serde_json::Value) -> Option<String> {
    let size = serde_json::to_vec(template).map_or(usize::MAX, |bytes| bytes.len());
    if size > configrollout_api::MAX_JOB_TEMPLATE_BYTES {
        return Some(format!(
            "{size} bytes of JSON, more than the {} a Job template may hold",
            configrollout_api::MAX_JOB_TEMPLATE_BYTES
        ));
    }
    match serde_json::from_value::<k8s_openapi::api::batch::v1::JobSpec>(template.clone()) {
        Err(error) => Some(format!("not a batch/v1 JobSpec: {error}")),
        Ok(spec)
            if spec
                .template
                .spec
                .as_ref()
                .is_none_or(|pod| pod.containers.is_empty()) =>
        {
            Some("template.spec.containers: a Job needs a container".to_owned())
        }
        Ok(_) => None,
    }
}

/// Calls `visit` on every string of `value` (not on object keys).
pub fn walk_strings(value: &mut serde_json::Value, visit: &mut impl FnMut(&mut String)) {
    match value {
        serde_json::Value::String(text) => visit(text),
        serde_json::Value::Array(items) => {
            for item in items {
                walk_strings(item, visit);
            }
        }
        serde_json::Value::Object(fields) => {
            for item in fields.values_mut() {
                walk_strings(item, visit);
            }
        }
        _ => {}
    }
}

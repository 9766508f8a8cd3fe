//! Test builds only (feature `fault-injection`, which the lab's controller enables): a
//! reconcile panics on purpose, so that the lab can show a panic stays in its rollout.
//! Armed only when the process also has `CONFIGROLLOUT_FAULT_INJECTION=1` in its
//! environment, and only for a rollout annotated [`PANIC_ANNOTATION`].

use kube::ResourceExt;

use crate::api::ConfigRollout;

/// The annotation that makes a reconcile of its rollout panic in a test build.
pub const PANIC_ANNOTATION: &str = "configrollout.dev/test-panic";
/// The environment variable that arms the injection.
pub const ARM_VARIABLE: &str = "CONFIGROLLOUT_FAULT_INJECTION";

/// Panics when armed and `rollout` asks for it.
pub fn maybe_panic(rollout: &ConfigRollout) {
    let armed = std::env::var(ARM_VARIABLE).is_ok_and(|value| value == "1");
    if armed && rollout.annotations().contains_key(PANIC_ANNOTATION) {
        panic!("fault injected by the configrollout.dev/test-panic annotation");
    }
}

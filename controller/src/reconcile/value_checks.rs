//! The validate step's second half: a candidate revision's key/values checked against
//! the schemas that apply to it and the external validators they name, before the
//! engine may declare it. What is refused is reported as `InvalidSpec` (reason
//! `InvalidValue`) naming the schema, the key, the rule and the pointer inside a
//! document, never a value; nothing is claimed, declared or written.
//!
//! Which schemas apply: the rollout's `spec.schemas`, the ones the current revision was
//! checked against (so that a change cannot drop the schema it breaks: a dropped one
//! stops applying from the revision after), and the ClusterConfigSchemas the namespace's
//! grant requires. Only a candidate is checked: a schema changed while a revision rolls
//! out applies from the next revision on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use super::fetch::Fetched;
use super::{Context, HubError, api_call};
use crate::api::annotations::SCHEMA_AUTHOR_ANNOTATION;
use crate::api::{
    ClusterConfigSchema, ClusterConfigValidator, ConfigRollout, ConfigSchema, ConfigSchemaSpec,
    SchemaKind, SchemaRecord,
};
use crate::engine::tenancy::REQUIRED_SCHEMAS;
use crate::validators::{ExternalValidator, ValidationRequest, Verdict};
use configrollout_core::values::{CompiledSchema, compile};

/// Compiled schemas kept at most; the cache is emptied when it would hold more. Small:
/// a compiled schema may hold up to 8 MiB of regular expressions, and compiling one
/// again costs milliseconds, only while a candidate is refused.
const MAX_COMPILED: usize = 16;
/// Validator verdicts kept at most; expired ones go first, then all.
const MAX_VERDICTS: usize = 4096;
/// How long an external validator's verdict on a candidate is reused.
const VERDICT_TTL: Duration = Duration::from_secs(600);
/// Most schemas, and most validators, that may apply to one candidate: the bound of
/// `status.history[].schemas` and `.validatedBy` in the CRD.
const MAX_APPLICABLE: usize = 32;
/// How long after a validator gave no verdict (timeout, error) it is asked again.
const FAILED_VERDICT_RETRY: Duration = Duration::from_secs(15);

/// The controller's caches for value checks: compiled schemas by object version, and
/// external validators' verdicts by candidate.
pub struct ValueChecks {
    /// Where the validators' HMAC Secrets live (the controller's namespace).
    pub(crate) controller_namespace: String,
    compiled: Mutex<HashMap<(String, i64), Arc<CompiledSchema>>>,
    verdicts: Mutex<HashMap<VerdictKey, (CachedVerdict, Instant)>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct VerdictKey {
    validator_uid: String,
    validator_generation: i64,
    rollout_uid: String,
    digest: String,
}

#[derive(Debug, Clone)]
enum CachedVerdict {
    Allowed,
    Refused(String),
    Failed(String),
}

/// What the value checks found for one candidate.
#[derive(Debug, Default)]
pub struct ValueCheck {
    /// Why it is refused; empty when every schema and validator accepts it.
    pub violations: Vec<String>,
    /// The schemas it was checked against, to record with the revision.
    pub schemas: Vec<SchemaRecord>,
    /// The external validators that accepted it, to record with the revision.
    pub accepted_by: Vec<String>,
    /// When to look again because a validator gave no verdict.
    pub retry_after: Option<Duration>,
}

/// One schema that applies to a candidate, and why.
struct Applicable {
    kind: SchemaKind,
    name: String,
    origin: Origin,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// `spec.schemas[index]`.
    Spec(usize),
    /// The current revision was checked against it; the spec no longer names it.
    Recorded,
    /// The grant requires it.
    Grant,
}

impl ValueChecks {
    /// Empty caches; HMAC Secrets are read in `controller_namespace`.
    pub fn new(controller_namespace: String) -> Self {
        ValueChecks {
            controller_namespace,
            compiled: Mutex::default(),
            verdicts: Mutex::default(),
        }
    }

    fn cached(&self, uid: &str, generation: i64) -> Option<Arc<CompiledSchema>> {
        self.lock_compiled()
            .get(&(uid.to_owned(), generation))
            .cloned()
    }

    fn remember(&self, uid: &str, generation: i64, compiled: Arc<CompiledSchema>) {
        let mut cache = self.lock_compiled();
        if cache.len() >= MAX_COMPILED {
            cache.clear();
        }
        cache.insert((uid.to_owned(), generation), compiled);
    }

    fn lock_compiled(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, i64), Arc<CompiledSchema>>> {
        self.compiled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_verdicts(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<VerdictKey, (CachedVerdict, Instant)>> {
        self.verdicts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cached_verdict(&self, key: &VerdictKey, now: Instant) -> Option<CachedVerdict> {
        let verdicts = self.lock_verdicts();
        let (verdict, at) = verdicts.get(key)?;
        let ttl = match verdict {
            CachedVerdict::Failed(_) => FAILED_VERDICT_RETRY,
            _ => VERDICT_TTL,
        };
        (now.saturating_duration_since(*at) < ttl).then(|| verdict.clone())
    }

    fn remember_verdict(&self, key: VerdictKey, verdict: CachedVerdict, now: Instant) {
        let mut verdicts = self.lock_verdicts();
        if verdicts.len() >= MAX_VERDICTS {
            verdicts.retain(|_, (_, at)| now.saturating_duration_since(*at) < VERDICT_TTL);
            if verdicts.len() >= MAX_VERDICTS {
                verdicts.clear();
            }
        }
        verdicts.insert(key, (verdict, now));
    }
}

/// Whether `desired` would declare a new revision (it is not what the current one
/// declares).
pub fn is_candidate(
    rollout: &ConfigRollout,
    fetched: &Fetched,
    desired: &BTreeMap<String, String>,
) -> bool {
    let current = rollout
        .status
        .as_ref()
        .and_then(|status| status.revision.as_ref())
        .and_then(|name| fetched.revisions.get(name));
    current.is_none_or(|current| current.desired() != *desired)
}

/// Checks the candidate `desired` of `rollout` against every schema that applies and the
/// validators they name. A hub read that fails is an error (the reconcile retries);
/// everything else is a verdict.
pub async fn check(
    ctx: &Context,
    rollout: &ConfigRollout,
    fetched: &Fetched,
    desired: &BTreeMap<String, String>,
) -> Result<ValueCheck, HubError> {
    let namespace = rollout.namespace().unwrap_or_default();
    let mut result = ValueCheck::default();
    let mut validators = BTreeSet::new();
    let applicable = applicable(rollout, fetched);
    // Each is recorded with the revision, in a list the CRD bounds.
    if applicable.len() > MAX_APPLICABLE {
        result.violations.push(format!(
            "{} schemas apply (spec.schemas, the grant's {REQUIRED_SCHEMAS} and those the \
             current revision was checked against), more than {MAX_APPLICABLE}",
            applicable.len()
        ));
        return Ok(result);
    }
    // The candidate is shared by the checks, which run off the runtime's threads.
    let data = Arc::new(desired.clone());
    for applicable in applicable {
        let label = label(applicable.kind, &namespace, &applicable.name);
        let Some(object) = read_schema(ctx, &namespace, &applicable).await? else {
            match applicable.origin {
                // Deleting a schema is its owners' decision, which RBAC governs.
                Origin::Recorded => {}
                Origin::Spec(index) => result
                    .violations
                    .push(format!("spec.schemas[{index}]: {label} does not exist")),
                Origin::Grant => result.violations.push(format!(
                    "{label}, required by the annotation {REQUIRED_SCHEMAS} on Namespace \
                     {namespace}, does not exist"
                )),
            }
            continue;
        };
        result.schemas.push(SchemaRecord {
            kind: applicable.kind,
            name: applicable.name.clone(),
            generation: object.generation,
            author: object.author.clone(),
            carried: applicable.origin == Origin::Recorded,
        });
        let compiled = match compiled(ctx, &object).await {
            Ok(compiled) => compiled,
            Err(errors) => {
                result.violations.push(format!(
                    "{label} is invalid and refuses every candidate: {errors}"
                ));
                continue;
            }
        };
        let violations: Vec<String> = {
            let (compiled, data) = (compiled.clone(), data.clone());
            off_runtime(move || compiled.check(&data))
                .await
                .map(|violations| violations.iter().map(ToString::to_string).collect())
                .unwrap_or_else(|| {
                    vec!["could not be checked (an internal error): refused".to_owned()]
                })
        };
        result.violations.extend(
            violations
                .into_iter()
                .map(|violation| format!("{label}: {violation}")),
        );
        validators.extend(compiled.validators().iter().cloned());
    }
    if validators.len() > MAX_APPLICABLE {
        result.violations.push(format!(
            "the schemas name {} ClusterConfigValidators, more than {MAX_APPLICABLE}",
            validators.len()
        ));
    }
    // External validators judge only what the schemas accept: a refused candidate is
    // not sent anywhere.
    if result.violations.is_empty() {
        for name in validators {
            match external_verdict(ctx, rollout, desired, &name).await? {
                CachedVerdict::Allowed => result.accepted_by.push(name),
                CachedVerdict::Refused(reason) => result.violations.push(format!(
                    "ClusterConfigValidator {name} refused it: {reason}"
                )),
                CachedVerdict::Failed(why) => {
                    result.violations.push(format!(
                        "ClusterConfigValidator {name} gave no verdict ({why}); a candidate \
                         is declared only once every validator accepts it"
                    ));
                    result.retry_after = Some(FAILED_VERDICT_RETRY);
                }
            }
        }
    }
    Ok(result)
}

/// Runs CPU-bound work (compiling or checking a schema, up to milliseconds on the largest
/// inputs) on the runtime's blocking pool, so that a tenant's heavy schema never holds a
/// worker the other reconciles and the Lease renewal need; `None` if it panicked.
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(work).await.ok()
}

/// The schema compiled: from the cache, or compiled now off the runtime's workers.
async fn compiled(ctx: &Context, object: &SchemaObject) -> Result<Arc<CompiledSchema>, String> {
    if let Some(found) = ctx.value_checks.cached(&object.uid, object.generation) {
        return Ok(found);
    }
    let spec = object.spec.clone();
    let compiled = off_runtime(move || compile(&spec))
        .await
        .ok_or_else(|| "could not be compiled (an internal error)".to_owned())?
        .map_err(|errors| {
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })?;
    let compiled = Arc::new(compiled);
    ctx.value_checks
        .remember(&object.uid, object.generation, compiled.clone());
    Ok(compiled)
}

/// The schemas that apply to the rollout's candidate, each once, spec first.
fn applicable(rollout: &ConfigRollout, fetched: &Fetched) -> Vec<Applicable> {
    let mut seen = BTreeSet::new();
    let mut list = Vec::new();
    let mut add = |kind: SchemaKind, name: &str, origin: Origin| {
        if seen.insert((kind == SchemaKind::ClusterConfigSchema, name.to_owned())) {
            list.push(Applicable {
                kind,
                name: name.to_owned(),
                origin,
            });
        }
    };
    for (index, reference) in rollout.spec.schemas.iter().enumerate() {
        add(reference.kind, &reference.name, Origin::Spec(index));
    }
    for name in &fetched.grant.required_schemas {
        add(SchemaKind::ClusterConfigSchema, name, Origin::Grant);
    }
    let recorded = rollout
        .status
        .as_ref()
        .and_then(|status| status.current_record())
        .map(|record| record.schemas.as_slice())
        .unwrap_or_default();
    for schema in recorded.iter().filter(|schema| !schema.carried) {
        add(schema.kind, &schema.name, Origin::Recorded);
    }
    list
}

fn label(kind: SchemaKind, namespace: &str, name: &str) -> String {
    match kind {
        SchemaKind::ConfigSchema => format!("ConfigSchema {namespace}/{name}"),
        SchemaKind::ClusterConfigSchema => format!("ClusterConfigSchema {name}"),
    }
}

/// A schema as read from the hub.
struct SchemaObject {
    uid: String,
    generation: i64,
    author: Option<String>,
    spec: ConfigSchemaSpec,
}

async fn read_schema(
    ctx: &Context,
    namespace: &str,
    applicable: &Applicable,
) -> Result<Option<SchemaObject>, HubError> {
    fn object<K: Resource>(object: &K, spec: ConfigSchemaSpec) -> SchemaObject {
        let meta = object.meta();
        SchemaObject {
            uid: meta.uid.clone().unwrap_or_default(),
            generation: meta.generation.unwrap_or_default(),
            author: meta
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(SCHEMA_AUTHOR_ANNOTATION))
                .cloned(),
            spec,
        }
    }
    Ok(match applicable.kind {
        SchemaKind::ConfigSchema => {
            let api: Api<ConfigSchema> = Api::namespaced(ctx.hub.clone(), namespace);
            api_call("read ConfigSchema", api.get_opt(&applicable.name))
                .await?
                .map(|schema| object(&schema, schema.spec.clone()))
        }
        SchemaKind::ClusterConfigSchema => {
            let api: Api<ClusterConfigSchema> = Api::all(ctx.hub.clone());
            api_call("read ClusterConfigSchema", api.get_opt(&applicable.name))
                .await?
                .map(|schema| object(&schema, schema.spec.rules.clone()))
        }
    })
}

/// The verdict of the ClusterConfigValidator `name` on the candidate: from the cache, or
/// asked now. A validator that cannot be asked (missing, misconfigured, its Secret
/// unreadable) gives no verdict, which refuses.
async fn external_verdict(
    ctx: &Context,
    rollout: &ConfigRollout,
    desired: &BTreeMap<String, String>,
    name: &str,
) -> Result<CachedVerdict, HubError> {
    let api: Api<ClusterConfigValidator> = Api::all(ctx.hub.clone());
    let Some(validator) = api_call("read ClusterConfigValidator", api.get_opt(name)).await? else {
        return Ok(CachedVerdict::Failed(format!(
            "no ClusterConfigValidator named {name}"
        )));
    };
    let digest = crate::crdt::desired_digest(&ctx.digest_keys.current(), desired);
    let key = VerdictKey {
        validator_uid: validator.uid().unwrap_or_default(),
        validator_generation: validator.metadata.generation.unwrap_or_default(),
        rollout_uid: rollout.uid().unwrap_or_default(),
        digest: digest.clone(),
    };
    let now = Instant::now();
    if let Some(verdict) = ctx.value_checks.cached_verdict(&key, now) {
        return Ok(verdict);
    }
    let hmac_key = match &validator.spec.hmac_secret {
        None => None,
        Some(reference) => {
            let secrets: Api<Secret> =
                Api::namespaced(ctx.hub.clone(), &ctx.value_checks.controller_namespace);
            let secret = api_call(
                "read validator HMAC Secret",
                secrets.get_opt(&reference.name),
            )
            .await?;
            match secret
                .and_then(|secret| secret.data)
                .and_then(|mut data| data.remove(&reference.key))
            {
                Some(bytes) if !bytes.0.is_empty() => Some(bytes.0),
                _ => {
                    return Ok(CachedVerdict::Failed(format!(
                        "its hmacSecret {}/{} key {} cannot be read",
                        ctx.value_checks.controller_namespace, reference.name, reference.key
                    )));
                }
            }
        }
    };
    let verdict = match ExternalValidator::new(&validator.spec, hmac_key) {
        Err(error) => CachedVerdict::Failed(error.to_string()),
        Ok(client) => {
            let namespace = rollout.namespace().unwrap_or_default();
            let rollout_name = rollout.name_any();
            let uid = rollout.uid().unwrap_or_default();
            let request = ValidationRequest {
                rollout_namespace: &namespace,
                rollout_name: &rollout_name,
                rollout_uid: &uid,
                target_namespace: &rollout.spec.target.namespace,
                target_name: &rollout.spec.target.name,
                digest: &digest,
                data: desired,
            };
            let started = Instant::now();
            let verdict = client
                .validate(&request, chrono::Utc::now().timestamp())
                .await;
            tracing::info!(
                validator = name,
                rollout = %format!("{namespace}/{rollout_name}"),
                %digest,
                allowed = matches!(verdict, Verdict::Allowed),
                elapsed_ms = started.elapsed().as_millis(),
                "external validator asked"
            );
            match verdict {
                Verdict::Allowed => CachedVerdict::Allowed,
                Verdict::Refused { reason } => CachedVerdict::Refused(reason),
                Verdict::Failed { why } => CachedVerdict::Failed(why),
            }
        }
    };
    ctx.value_checks
        .remember_verdict(key, verdict.clone(), Instant::now());
    Ok(verdict)
}

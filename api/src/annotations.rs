//! Annotations on a ConfigRollout: the ones operators (or `kubectl configrollout`) set to
//! steer it, each an RFC 3339 time so that a command is acted on once, and the one the
//! apiserver stamps.

/// Abort the rollout (roll back what was published, whatever the phase), set at this time.
pub const ABORT_ANNOTATION: &str = "configrollout.dev/abort";
/// Retry a halted rollout (from its failed stage, or a rollback that gave up, as a
/// rollback), set at this time. A rolled-back revision is not retried: declare a new one.
pub const RETRY_ANNOTATION: &str = "configrollout.dev/retry";
/// Who changed the spec, one line per change since the controller last declared a
/// revision (see [`crate::author_stamp`]), stamped by the apiserver
/// (`policies/mutating/spec-author.yaml`), never by a client or the controller.
pub const SPEC_AUTHOR_ANNOTATION: &str = "configrollout.dev/spec-author";
/// Label a `fromConfigMap` source carries so that `policies/mutating/source-author.yaml` stamps
/// who edits it.
pub const SOURCE_LABEL: &str = "configrollout.dev/source";
/// Annotation on a labelled source ConfigMap: who changed its data, one line per change
/// (see [`crate::author_stamp`]), stamped by the apiserver
/// (`policies/mutating/source-author.yaml`), never by a client.
pub const SOURCE_AUTHOR_ANNOTATION: &str = "configrollout.dev/data-author";
/// Who last changed a ConfigSchema's or ClusterConfigSchema's spec, stamped by the
/// apiserver (`policies/mutating/schema-author.yaml`); recorded with each revision the schema
/// validated.
pub const SCHEMA_AUTHOR_ANNOTATION: &str = "configrollout.dev/schema-author";

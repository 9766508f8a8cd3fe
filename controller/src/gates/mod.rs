//! Metric gates: the condition grammar, the verdict of one sample, query templates, and
//! the provider seam through which a sample is taken.
//!
//! Everything here is pure except [`prometheus`], the one file that talks to a metrics
//! backend, so the grammar and the verdicts are tested without one and the Prometheus path
//! against the real server.

pub mod condition;
pub mod prometheus;
pub mod provider;
pub mod template;
pub mod verdict;

pub use condition::{Comparison, Condition, ConditionError};
pub use provider::{Access, Authorization, Credentials, GateProvider, SampleFuture, SampleSource};
pub use template::{TemplateError, TemplateValues, check_template, render, uses_placeholder};
pub use verdict::{Answer, Evaluation, InconclusiveReason, Labels, QueryResult, Verdict, evaluate};

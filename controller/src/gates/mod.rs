//! Metric gates: the condition grammar, the verdict of one sample, query templates, and
//! the provider seam through which a sample is taken.
//!
//! Everything here except [`GateProvider`] implementations is pure. The Prometheus
//! implementation of [`GateProvider`] lives with the IO code, so this module has no
//! HTTP or Prometheus dependency.

pub mod condition;
pub mod provider;
pub mod template;
pub mod verdict;

pub use condition::{Comparison, Condition, ConditionError};
pub use provider::{GateProvider, SampleFuture};
pub use template::{TemplateError, TemplateValues, check_template, render, uses_placeholder};
pub use verdict::{Evaluation, InconclusiveReason, Labels, QueryResult, Verdict, evaluate};

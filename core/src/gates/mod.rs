//! Metric gates: the condition grammar, the verdict of one sample, query templates, and
//! the provider seam through which a sample is taken.
//!
//! Everything here is pure: the one provider that talks to a metrics backend is the
//! controller's (`configrollout::prometheus`), so the grammar and the verdicts are tested
//! without one and the Prometheus path against the real server.

pub mod compare;
pub mod condition;
pub mod job;
pub mod provider;
pub mod scope;
pub mod template;
pub mod verdict;
pub mod web;

pub use compare::{Direction, Rules, Side, compare};
pub use condition::{Comparison, Condition, ConditionError};
pub use provider::{
    Access, Authorization, Credentials, GateProvider, SampleFuture, SampleSource, SeriesAnswer,
    SeriesFuture, Span,
};
pub use template::{TemplateError, TemplateValues, check_template, render, uses_placeholder};
pub use verdict::{Answer, Evaluation, InconclusiveReason, Labels, QueryResult, Verdict, evaluate};
pub use web::{JsonPathQuery, WebGateError};

//! A rollout's notifications: the subscriptions its spec names, and in its status the
//! notices due (an outbox written in the same status write as the transition it
//! announces, so a restart neither loses nor invents one) and how far each sink has
//! been delivered.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// Most subscriptions a rollout may name.
pub const MAX_SUBSCRIPTIONS: u64 = 8;
/// Most notices the outbox keeps; past it the oldest undelivered are dropped (and
/// counted as such per sink).
pub const MAX_OUTBOX: usize = 32;
/// Longest message a notice carries, in characters.
pub const MAX_NOTICE_MESSAGE_CHARS: usize = 512;

/// A subscription of the rollout to a platform sink.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    /// Name of a ClusterNotificationSink that the namespace's grant allows (annotation
    /// `configrollout.dev/notification-sinks` on the rollout's Namespace).
    #[schemars(transform = schema::dns_subdomain("spec.notifications[].sink"))]
    pub sink: String,
    /// The transitions announced; empty: every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(16))]
    pub triggers: Vec<NotificationTrigger>,
    /// How long a stage may wait for its approval before it is announced again
    /// (`StillAwaitingApproval`), e.g. `30m`; absent: never again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::duration(
        "spec.notifications[].remindAfter",
        crate::PAUSE_CEILING
    ))]
    pub remind_after: Option<String>,
}

impl Subscription {
    /// Whether this subscription announces `trigger`.
    pub fn wants(&self, trigger: NotificationTrigger) -> bool {
        self.triggers.is_empty() || self.triggers.contains(&trigger)
    }
}

/// A transition worth telling people about.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum NotificationTrigger {
    /// A stage waits for a StageApproval.
    AwaitingApproval,
    /// A stage still waits for its approval after the subscription's `remindAfter`.
    StillAwaitingApproval,
    /// A stage passed its gates and bake time.
    StagePassed,
    /// The rollout stopped on a failure.
    Halted,
    /// The rollout started reverting its revision.
    RollingBack,
    /// The revision was reverted everywhere it reached.
    RolledBack,
    /// Every stage passed.
    Complete,
    /// A gate's verdict is Failed.
    GateFailing,
    /// A gate's samples came back inconclusive or its queries failed.
    GateInconclusive,
    /// A region's live values differ from what the rollout wrote.
    DriftDetected,
    /// A region's API server stopped answering.
    RegionUnreachable,
    /// The spec (or the candidate's values) was refused before any region write.
    SpecRefused,
}

impl NotificationTrigger {
    /// Every trigger, in a stable order.
    pub const ALL: [NotificationTrigger; 12] = [
        Self::AwaitingApproval,
        Self::StillAwaitingApproval,
        Self::StagePassed,
        Self::Halted,
        Self::RollingBack,
        Self::RolledBack,
        Self::Complete,
        Self::GateFailing,
        Self::GateInconclusive,
        Self::DriftDetected,
        Self::RegionUnreachable,
        Self::SpecRefused,
    ];

    /// The name as written in a spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AwaitingApproval => "AwaitingApproval",
            Self::StillAwaitingApproval => "StillAwaitingApproval",
            Self::StagePassed => "StagePassed",
            Self::Halted => "Halted",
            Self::RollingBack => "RollingBack",
            Self::RolledBack => "RolledBack",
            Self::Complete => "Complete",
            Self::GateFailing => "GateFailing",
            Self::GateInconclusive => "GateInconclusive",
            Self::DriftDetected => "DriftDetected",
            Self::RegionUnreachable => "RegionUnreachable",
            Self::SpecRefused => "SpecRefused",
        }
    }

    /// The trigger named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|trigger| trigger.as_str() == name)
    }
}

/// The rollout's notifications: the outbox of notices and each sink's delivery.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationStatus {
    /// The number of the last notice raised; each notice takes the next.
    #[serde(default)]
    pub sequence: i64,
    /// Notices some subscribed sink has not been delivered yet, oldest first (at most
    /// 32).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(MAX_OUTBOX as u64))]
    pub outbox: Vec<Notice>,
    /// One entry per subscribed sink.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(2 * MAX_SUBSCRIPTIONS))]
    pub sinks: Vec<SinkDelivery>,
    /// The approval the rollout waits for now, since when, and which sinks were
    /// reminded of it (each once, after its subscription's `remindAfter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_wait: Option<ApprovalWait>,
}

/// An approval a rollout waits for, as notifications track it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalWait {
    /// `<revision>/<stage>`.
    pub wait: String,
    /// When the wait began.
    pub since: Time,
    /// The sinks already reminded of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(2 * MAX_SUBSCRIPTIONS))]
    pub reminded: Vec<String>,
}

impl NotificationStatus {
    /// The delivery record of `sink`, if it is subscribed.
    pub fn sink(&self, sink: &str) -> Option<&SinkDelivery> {
        self.sinks.iter().find(|delivery| delivery.sink == sink)
    }
}

/// One transition to announce.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    /// Its number, from `sequence`: with the rollout's uid, the idempotency key every
    /// delivery of it carries.
    pub sequence: i64,
    /// What happened.
    pub trigger: NotificationTrigger,
    /// The only sinks it is for (a reminder is for the sinks that asked for one); empty:
    /// every sink that wants its trigger.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(2 * MAX_SUBSCRIPTIONS))]
    pub sinks: Vec<String>,
    /// The revision it happened to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The stage it happened in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The region or gate it is about, when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The condition's reason (machine-readable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened, in words (the condition's message: names and counts, never a
    /// value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::max_length(MAX_NOTICE_MESSAGE_CHARS as u64))]
    pub message: Option<String>,
    /// The rollout's progress then, e.g. `2/5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// When it happened.
    pub at: Time,
}

/// How far one sink has been delivered.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SinkDelivery {
    /// The ClusterNotificationSink.
    pub sink: String,
    /// The triggers it is sent (empty: every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<NotificationTrigger>,
    /// Every notice up to this number has been delivered (or given up on, or was not
    /// for this sink).
    #[serde(default)]
    pub delivered_through: i64,
    /// How the last attempt ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<DeliveryResult>,
    /// When the last result was reached: the last delivery, or the first attempt that
    /// failed the way the last one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt_at: Option<Time>,
    /// Why the last attempt failed (the class of failure: never the receiver's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Notices given up on: attempts exhausted, or dropped from a full outbox.
    #[serde(default)]
    pub given_up: i64,
}

/// How a delivery attempt ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DeliveryResult {
    /// The receiver answered 2xx.
    Delivered,
    /// It failed; it is tried again.
    Retrying,
    /// It failed on every attempt, or was dropped: given up.
    GaveUp,
    /// The sink cannot be used: it does not exist, the grant does not allow it, a Secret
    /// it names is missing. Nothing was sent.
    Unusable,
}

impl DeliveryResult {
    /// The name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "Delivered",
            Self::Retrying => "Retrying",
            Self::GaveUp => "GaveUp",
            Self::Unusable => "Unusable",
        }
    }
}

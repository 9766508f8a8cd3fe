//! Notifications: telling people about a rollout's transitions through the platform's
//! sinks ([`crate::api::ClusterNotificationSink`]).
//!
//! What is announced, and the outbox in each rollout's status, is decided by the core
//! ([`crate::notify`]); [`format`] renders a notice for a sink type; [`sink`] is one
//! sink's HTTP client; [`sender`] delivers, one worker per sink.
//!
//! # Wire protocol
//!
//! Every notification is one `POST` to the sink's URL with the sink type's body (see
//! [`format`]) and the headers
//!
//! - `Idempotency-Key: <rollout uid>.<notice number>`: the same on every delivery of one
//!   notice, by whichever replica, so that a receiver drops repeats (delivery is at least
//!   once);
//! - `X-Configrollout-Timestamp: <unix seconds>`;
//! - `X-Configrollout-Signature: sha256=<hex HMAC-SHA256 of timestamp + "." + body>` when
//!   the sink names an `hmacSecret` (the scheme of the external validators);
//! - the sink's `headers`, their values from Secrets.
//!
//! Any 2xx answer is a delivery; anything else (another status, a redirect, which is
//! never followed, no answer within `timeoutSeconds`) is a failed attempt, retried after
//! 1 s, 2 s, 4 s ... (at most a minute) up to [`sender::MAX_ATTEMPTS`] attempts, then
//! given up and counted (`status.notifications.sinks[].givenUp`, the metric
//! `configrollout_notifications_total{result="gave_up"}` and the alert
//! `ConfigRolloutNotificationsFailing`). A body carries names, the revision, counts,
//! reasons and links, never a configuration value.

pub mod format;
pub mod sender;
pub mod sink;

pub use sender::Notifier;

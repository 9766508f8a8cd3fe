//! What the plugin prints, as pure functions of the objects read: the `get` tree, the
//! `list` table, `history`, what a rollout waits on and who can unblock it, and the verdict
//! `status` exits with. No IO and no clock, so every rendering has a snapshot test.
//!
//! Status never holds a configuration value, and nothing here reads `spec.data`: the
//! renderings show names, revisions, digests, counts and metric samples only. `diff` is
//! the one rendering given values (read from the revisions, under the caller's RBAC), and
//! it masks them unless asked.
//!
//! By area: `text` (times, phases, tenant text made safe), `outcome` (the `status`
//! verdict), `approval` (awaiting, required, four-eyes), `waiting` (what a rollout waits
//! on), `tree` (the `get` view), `tables` (`list`, `history`, the `get` view's
//! notifications), `notifications` (a rollout's subscriptions and each sink's delivery,
//! as rows) and `diff`.

mod approval;
mod diff;
mod notifications;
mod outcome;
mod tables;
mod text;
mod tree;
mod waiting;

pub use approval::{awaiting_approval, four_eyes_refusal, requires_approval};
pub use configrollout_api::annotations::SPEC_AUTHOR_ANNOTATION;
pub use diff::{KeyChange, MASK, diff_keys, render_diff};
pub use notifications::{DeliveryRow, NotificationRow, notification_rows, pending_notices};
pub use outcome::{Outcome, outcome, status_is_current};
pub use tables::{render_history, render_list, render_notifications};
pub use text::{comparison_summary, printable, time};
pub use tree::{SAMPLES_SHOWN, render_get};
pub use waiting::{Waiting, waiting_on};

#[cfg(test)]
mod tests;

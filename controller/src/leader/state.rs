//! The read side of the election every writer consults.

use tokio::sync::watch;
use tokio::time::Instant;

/// Read side of the election, cheap to clone. The rule for every writer: only patch while
/// [`LeaderState::is_leading`] is true, and stop when [`LeaderState::lost`] resolves.
#[derive(Clone, Debug)]
pub struct LeaderState {
    leading: watch::Receiver<bool>,
    reachable: watch::Receiver<bool>,
    /// The renew deadline of the current tenure, shared with the elector: leadership
    /// ends at that instant even if the elector has not run since (a process frozen
    /// and resumed must not write on a flag its elector had no chance to clear). `None`:
    /// no election, no deadline.
    valid_until: Option<std::sync::Arc<std::sync::Mutex<Option<Instant>>>>,
    /// Senders kept alive for a state without an elector ([`LeaderState::always_leading`]).
    _fixed: Option<std::sync::Arc<(watch::Sender<bool>, watch::Sender<bool>)>>,
}

impl LeaderState {
    /// A state that is always leading and reachable, for a process run without election
    /// (a single replica, or tests).
    pub fn always_leading() -> Self {
        let (leading_tx, leading) = watch::channel(true);
        let (reachable_tx, reachable) = watch::channel(true);
        LeaderState {
            leading,
            reachable,
            valid_until: None,
            _fixed: Some(std::sync::Arc::new((leading_tx, reachable_tx))),
        }
    }

    /// A state driven by the given channels (tests of the consumers).
    #[cfg(test)]
    pub(crate) fn from_channels(
        leading: watch::Receiver<bool>,
        reachable: watch::Receiver<bool>,
    ) -> Self {
        LeaderState {
            leading,
            reachable,
            valid_until: None,
            _fixed: None,
        }
    }

    /// Whether this process holds the Lease now. False once the elector is gone, whatever
    /// it last said.
    pub fn is_leading(&self) -> bool {
        let within_tenure = self.valid_until.as_ref().is_none_or(|valid_until| {
            valid_until
                .lock()
                .ok()
                .and_then(|until| *until)
                .is_some_and(|until| Instant::now() < until)
        });
        self.leading.has_changed().is_ok() && *self.leading.borrow() && within_tenure
    }

    /// Whether the elector's last attempt reached the API server (leading or standing by
    /// knowingly, as opposed to cut off).
    pub fn is_reachable(&self) -> bool {
        self.reachable.has_changed().is_ok() && *self.reachable.borrow()
    }

    /// Resolves once this process leads (at once if it does). Also resolves if the elector
    /// is gone, with `false`.
    pub async fn acquired(&self) -> bool {
        let mut leading = self.leading.clone();
        // wait_for answers from the last value even when the elector is gone.
        leading.wait_for(|leading| *leading).await.is_ok() && self.is_leading()
    }

    /// Resolves once this process does not lead (at once if it does not), including when the
    /// elector is gone.
    pub async fn lost(&self) {
        let mut leading = self.leading.clone();
        // An Err means the elector is gone, which also means we do not lead.
        let _ = leading.wait_for(|leading| !*leading).await;
    }

    /// The state an elector drives: its channels, and its current tenure's deadline.
    pub(super) fn elected(
        leading: watch::Receiver<bool>,
        reachable: watch::Receiver<bool>,
        valid_until: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
    ) -> Self {
        LeaderState {
            leading,
            reachable,
            valid_until: Some(valid_until),
            _fixed: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn leadership_ends_at_the_renew_deadline_even_if_the_elector_did_not_run() {
        // A process frozen past its deadline resumes with the flag still set: the
        // deadline alone must stop its writes.
        let (_leading, leading_rx) = watch::channel(true);
        let (_reachable, reachable_rx) = watch::channel(true);
        let valid_until = std::sync::Arc::new(std::sync::Mutex::new(Some(
            Instant::now() + Duration::from_secs(60),
        )));
        let state = LeaderState {
            leading: leading_rx,
            reachable: reachable_rx,
            valid_until: Some(valid_until.clone()),
            _fixed: None,
        };
        assert!(state.is_leading());
        *valid_until.lock().unwrap() = Some(Instant::now() - Duration::from_millis(1));
        assert!(!state.is_leading());
        *valid_until.lock().unwrap() = None;
        assert!(!state.is_leading());
    }

    #[tokio::test]
    async fn leader_state_lost_and_acquired_follow_the_channel() {
        let (leading, leading_rx) = watch::channel(false);
        let (_reachable, reachable_rx) = watch::channel(true);
        let state = LeaderState {
            leading: leading_rx,
            reachable: reachable_rx,
            valid_until: None,
            _fixed: None,
        };
        assert!(!state.is_leading());
        state.lost().await;
        leading.send_replace(true);
        assert!(state.acquired().await);
        assert!(state.is_leading());
        drop(leading);
        // The elector is gone: not leading any more.
        assert!(!state.is_leading());
        state.lost().await;
        assert!(!state.acquired().await);
    }

    #[tokio::test]
    async fn a_state_without_elector_leads() {
        let state = LeaderState::always_leading();
        assert!(state.is_leading());
        assert!(state.is_reachable());
        assert!(state.acquired().await);
    }
}

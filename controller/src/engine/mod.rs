//! The rollout state machine: pure, no IO, deterministic clock.

//! Hybrid logical clock, LWW map, deltas and digests: pure, no IO.

//! CRD types for `configrollout.dev/v1alpha1`.

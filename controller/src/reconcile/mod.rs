//! Glue between the cluster and the engine: every API call of the controller process
//! lives here or in `regions`.

pub mod leader;

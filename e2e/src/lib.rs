//! The configrollout lab: real Kubernetes control planes for integration and end-to-end
//! tests, never a mocked API server.
//!
//! [`Lab::start`] builds (once, cached) the Go programs in `e2e/controlplane` and starts
//! a hub and N regions, each an upstream `kube-apiserver` on an embedded etcd on
//! loopback, with static-token users ([`User`]) and RBAC. Each region has a workload
//! whose request and error counters Debian's Prometheus scrapes every second; tests turn
//! its error ratio up and down with [`Lab::set_error_rate`]; it also consumes a ConfigMap
//! of its region ([`Lab::watch_config`]), reports the revision each of its consumers
//! activated, and fails requests while they run an invalid configuration. The hub gets `crds/`, a
//! kubeconfig Secret and a `Region` object per region. Regions can be stopped and
//! started again with their data. With [`LabOptions::workload_controllers`] every region
//! also runs upstream kube-controller-manager and kube-scheduler and KWOK, so its
//! Deployments get pods that turn Ready on a fake node. Dropping the lab stops every
//! process it started. [`gitops`] judges the lab's objects as Flux (kstatus) and Argo CD
//! (the shipped health and action scripts) do.

pub mod bench;
pub mod chart;
mod child;
mod controlplane;
pub mod docs;
mod error;
pub mod gitops;
pub mod gobuild;
mod lab;
pub mod manifests;
mod process;
pub mod procstat;
pub mod prometheus;
pub mod proxy;
pub mod victoria;
pub mod web_server;
pub mod webdriver;
mod workload;
mod workload_controllers;

pub use child::LabChild;
pub use controlplane::{ReadyInfo, User};
pub use error::LabError;
pub use lab::{
    API_VERSION, HUB, KUBECONFIG_SECRET_KEY, Lab, LabOptions, REGION_LABEL, SYSTEM_NAMESPACE,
    TIER_LABEL, region_name, repository_root,
};
pub use process::{process_alive, processes_mentioning};
pub use prometheus::Sample;
pub use web_server::{SeenRequest, WebServer};
pub use workload::{ConfigLoad, ConfigSource};
pub use workload_controllers::{CONTROLLERS, KWOK_NODE_ANNOTATION, fake_node_name};

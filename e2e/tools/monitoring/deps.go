// Package monitoring pins the prometheus-operator API (monitoring.coreos.com/v1) whose
// CRDs controller-gen (a tool of this module) writes for the lab: the chart's
// ServiceMonitor and PrometheusRule are checked against their real schemas
// (e2e/tests/install.rs).
package monitoring

import _ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"

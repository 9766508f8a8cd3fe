package crdcheck

import (
	"sort"
	"testing"
)

// Prints the estimated cost of every rule against the apiserver's limits: the headroom
// left before a CRD change is refused. `go test -run TestRuleCostHeadroom -v`.
func TestRuleCostHeadroom(t *testing.T) {
	crds := loadCRDs(t)
	var kinds []string
	for k := range crds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		costs, err := RuleCosts(crds[kind])
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		var total uint64
		for _, c := range costs {
			total += c.Total
			t.Logf("%-14s %-40s per call %8d x %6d = %10d (%.2f%% of per-rule limit)",
				kind, c.Path, c.PerCall, c.Cardinality, c.Total, 100*float64(c.Total)/PerRuleLimit)
			if c.Total > PerRuleLimit {
				t.Errorf("%s %s: estimated cost %d over the per-rule limit %d", kind, c.Path, c.Total, uint64(PerRuleLimit))
			}
		}
		t.Logf("%-14s total %d (%.2f%% of per-CRD limit %d)", kind, total, 100*float64(total)/PerCRDLimit, uint64(PerCRDLimit))
		if total > PerCRDLimit {
			t.Errorf("%s: total estimated cost %d over the per-CRD limit", kind, total)
		}
	}
}

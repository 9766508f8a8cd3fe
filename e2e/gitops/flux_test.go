package gitops

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// The shipped Flux example health-checks ConfigRollouts: every Kustomization in it waits
// for everything it applies, or names ConfigRollouts in healthChecks, with a timeout
// (else Flux's default, the interval, bounds how long a rollout may wait).
func TestTheFluxExampleWaitsForConfigRollouts(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "flux", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	documents := bytes.Split(raw, []byte("\n---\n"))
	for i, document := range documents {
		var kustomization struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Spec       struct {
				Wait         bool   `json:"wait"`
				Timeout      string `json:"timeout"`
				HealthChecks []struct {
					APIVersion string `json:"apiVersion"`
					Kind       string `json:"kind"`
					Name       string `json:"name"`
				} `json:"healthChecks"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(document, &kustomization); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if kustomization.APIVersion != "kustomize.toolkit.fluxcd.io/v1" || kustomization.Kind != "Kustomization" {
			t.Errorf("document %d is %s %s", i, kustomization.APIVersion, kustomization.Kind)
		}
		checksRollouts := kustomization.Spec.Wait
		for _, check := range kustomization.Spec.HealthChecks {
			if check.APIVersion == "configrollout.dev/v1alpha1" && check.Kind == "ConfigRollout" && check.Name != "" {
				checksRollouts = true
			}
		}
		if !checksRollouts {
			t.Errorf("document %d health-checks no ConfigRollout", i)
		}
		if kustomization.Spec.Timeout == "" {
			t.Errorf("document %d has no timeout", i)
		}
	}
}

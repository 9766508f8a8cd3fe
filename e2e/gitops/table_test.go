package gitops

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"configrollout.dev/e2e/gitops/argocd"
)

// shipped is the resource_customizations directory of deploy/argocd; its testdata are
// objects taken from the lab (e2e/tests/controller.rs and safety.rs, run with
// CONFIGROLLOUT_GITOPS_CAPTURE), one per phase.
var shipped = argocd.Customizations(filepath.Join("..", "..", "deploy", "argocd", "resource_customizations"))

// seen is what each tool must make of an object in some state.
type seen struct{ kstatus, argoCD string }

// As DESIGN.md ("Status") and issue 31 have it: complete is Current and Healthy; waiting
// is InProgress, and Suspended where a person or spec.paused must act; halted, rolled
// back or refused is Failed and Degraded. A rollback in flight is still the controller's
// work for kstatus, but Argo CD is told at once that the revision failed. Unobserved is a
// spec (or a whole object) the controller has not decided on yet.
var rolloutTable = map[string]seen{
	"Unobserved":       {"InProgress", "Progressing"},
	"Pending":          {"InProgress", "Progressing"},
	"Progressing":      {"InProgress", "Progressing"},
	"Paused":           {"InProgress", "Suspended"},
	"AwaitingApproval": {"InProgress", "Suspended"},
	"RollingBack":      {"InProgress", "Degraded"},
	"Complete":         {"Current", "Healthy"},
	"Halted":           {"Failed", "Degraded"},
	"RolledBack":       {"Failed", "Degraded"},
	"InvalidSpec":      {"Failed", "Degraded"},
}

// A Region is Current once the controller's probe reached its API server, Failed while
// it does not answer.
var regionTable = map[string]seen{
	"Unobserved":  {"InProgress", "Progressing"},
	"Reachable":   {"Current", "Healthy"},
	"Unreachable": {"Failed", "Degraded"},
}

// Pending with a valid spec needs a rollout with no desired data yet, which the lab
// cannot make; the engine's tests cover its conditions.
var notFromTheLab = map[string]bool{"Pending": true}

// state is the row of the table obj belongs to, read from the object itself.
func state(obj map[string]any) string {
	status, _ := obj["status"].(map[string]any)
	metadata, _ := obj["metadata"].(map[string]any)
	observed, _ := status["observedGeneration"].(int64)
	generation, _ := metadata["generation"].(int64)
	if status == nil || observed != generation {
		return "Unobserved"
	}
	conditions, _ := status["conditions"].([]any)
	for _, c := range conditions {
		condition, _ := c.(map[string]any)
		if condition["type"] == "InvalidSpec" && condition["status"] == "True" {
			return "InvalidSpec"
		}
	}
	if obj["kind"] == "Region" {
		if status["reachable"] == true {
			return "Reachable"
		}
		return "Unreachable"
	}
	phase, _ := status["phase"].(string)
	return phase
}

func testdata(t *testing.T, kind string) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(string(shipped), "configrollout.dev", kind, "testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s testdata: %v", kind, err)
	}
	objects := map[string]map[string]any{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := Decode(raw)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		objects[filepath.Base(file)] = obj
	}
	return objects
}

// kstatus (cli-utils status.Compute) and the shipped health.lua over every object the lab
// gave, in every state of the table, give what the table says; and the lab gave one in
// every state.
func TestEveryStateReadsAsAPersonWould(t *testing.T) {
	for kind, table := range map[string]map[string]seen{"ConfigRollout": rolloutTable, "Region": regionTable} {
		covered := map[string]bool{}
		for file, obj := range testdata(t, kind) {
			row := state(obj)
			want, ok := table[row]
			if !ok {
				t.Errorf("%s/%s: state %q is not in the table", kind, file, row)
				continue
			}
			covered[row] = true
			verdict, err := Judge(obj, shipped)
			if err != nil {
				t.Errorf("%s/%s: %v", kind, file, err)
				continue
			}
			got := seen{verdict.Kstatus.Status, verdict.ArgoCD.Status}
			if got != want {
				t.Errorf("%s/%s (%s): kstatus %s, Argo CD %s; want %s, %s (%+v)", kind, file, row, got.kstatus, got.argoCD, want.kstatus, want.argoCD, verdict)
			}
			if verdict.Kstatus.Message == "" || verdict.ArgoCD.Message == "" {
				t.Errorf("%s/%s: a verdict without a message: %+v", kind, file, verdict)
			}
		}
		var missing []string
		for row := range table {
			if !covered[row] && !notFromTheLab[row] {
				missing = append(missing, row)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("%s: no object from the lab in states %v", kind, missing)
		}
	}
}

// What the issue found: without the kstatus conditions and observedGeneration, kstatus
// takes every rollout for Current, halted in its canary or not. The same objects with
// them stripped read Current, so the test above is not passing by kstatus' defaults.
func TestWithoutTheConditionsEveryRolloutWasCurrent(t *testing.T) {
	for file, obj := range testdata(t, "ConfigRollout") {
		status, _ := obj["status"].(map[string]any)
		if status == nil {
			continue
		}
		delete(status, "observedGeneration")
		conditions, _ := status["conditions"].([]any)
		var kept []any
		for _, c := range conditions {
			switch c.(map[string]any)["type"] {
			case "Ready", "Reconciling", "Stalled":
			default:
				kept = append(kept, c)
			}
		}
		status["conditions"] = kept
		got, err := Kstatus(obj)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != "Current" {
			t.Errorf("%s: without the kstatus conditions kstatus says %s", file, got.Status)
		}
	}
}

// A finished rollout whose spec changed reads InProgress until the controller has
// observed the new generation, whatever its conditions say; the shipped health.lua too.
func TestAnUnobservedGenerationIsInProgress(t *testing.T) {
	obj := testdata(t, "ConfigRollout")["complete.yaml"]
	if obj == nil {
		t.Fatal("no complete.yaml")
	}
	metadata := obj["metadata"].(map[string]any)
	metadata["generation"] = metadata["generation"].(int64) + 1
	verdict, err := Judge(obj, shipped)
	if err != nil {
		t.Fatal(err)
	}
	if verdict.Kstatus.Status != "InProgress" || verdict.ArgoCD.Status != "Progressing" {
		t.Errorf("got %+v", verdict)
	}
}

func TestTheApproverIsWhatThePlatformSets(t *testing.T) {
	script, err := shipped.Action("configrollout.dev", "ConfigRollout", "approve")
	if err != nil {
		t.Fatal(err)
	}
	set, err := WithApprover(script, "system:serviceaccount:gitops:argocd-server")
	if err != nil {
		t.Fatal(err)
	}
	if set == script || len(set) != len(script)-len("argocd:argocd-server")+len("gitops:argocd-server") {
		t.Errorf("approver not replaced exactly once")
	}
	if _, err := WithApprover("return obj", "x"); err == nil {
		t.Error("a script without the approver line was accepted")
	}
}

package argocd

import (
	"testing"
	"time"
)

// The sandbox is Argo CD's, not a friendlier one: a script that works here works there.
func TestScriptsRunInArgoCDsSandbox(t *testing.T) {
	obj := map[string]any{"metadata": map[string]any{"generation": int64(2)}, "spec": map[string]any{}}
	run := func(vm VM, script string) (HealthStatus, error) { return vm.Health(obj, script) }

	// Without open libraries (argocd-cm's default, and always for actions) there is no
	// string library and no global os; require("os") has only time and date.
	for _, script := range []string{
		`return {status = string.upper("healthy")}`,
		`return {status = ("x"):upper()}`,
		`return {status = os.date("!%Y")}`,
		`local os = require("os"); return {status = os.getenv("HOME")}`,
		`local io = require("io"); return {status = "Healthy"}`,
	} {
		if _, err := run(VM{}, script); err == nil {
			t.Errorf("%s: ran without Argo CD's open libraries", script)
		}
	}
	status, err := run(VM{}, `local os = require("os"); return {status = "Healthy", message = os.date("!%Y-%m-%dT%H:%M:%SZ")}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339, status.Message); err != nil {
		t.Errorf("os.date: %v", err)
	}
	// Numbers from the object are Lua numbers, and print as integers.
	status, err = run(VM{}, `return {status = "Progressing", message = "generation " .. obj.metadata.generation}`)
	if err != nil || status.Message != "generation 2" {
		t.Errorf("got %+v, %v", status, err)
	}
	// An unknown health code is Unknown, with Argo CD's message.
	status, err = run(VM{}, `return {status = "Fine"}`)
	if err != nil || status != (HealthStatus{Status: "Unknown", Message: invalidHealthStatus}) {
		t.Errorf("got %+v, %v", status, err)
	}
	// A script that never ends is stopped after a second.
	started := time.Now()
	if _, err := run(VM{}, `while true do end`); err == nil || time.Since(started) > 5*time.Second {
		t.Errorf("an endless script: %v after %s", err, time.Since(started))
	}
	// Open libraries (Argo CD's built-in health scripts) add string and os.
	if _, err := run(VM{OpenLibs: true}, `return {status = string.format("%s", "Healthy")}`); err != nil {
		t.Errorf("with open libraries: %v", err)
	}
}

func TestAnActionReturnsAPatchOrAListOfOperations(t *testing.T) {
	obj := map[string]any{
		"apiVersion": "configrollout.dev/v1alpha1", "kind": "ConfigRollout",
		"metadata": map[string]any{"name": "r", "labels": map[string]any{}},
		"spec":     map[string]any{"paused": false, "data": map[string]any{}},
	}
	acted, err := VM{}.Act(obj, `obj.spec.paused = true; return obj`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if acted.AsList || len(acted.Impacted) != 1 || acted.Impacted[0].Operation != "patch" {
		t.Fatalf("got %+v", acted)
	}
	patched := acted.Impacted[0].Resource
	// Lua gives back empty maps as empty lists; Argo CD turns them back into maps.
	if _, ok := patched["metadata"].(map[string]any)["labels"].(map[string]any); !ok {
		t.Errorf("empty labels came back as %#v", patched["metadata"])
	}
	if _, ok := patched["spec"].(map[string]any)["data"].(map[string]any); !ok {
		t.Errorf("empty data came back as %#v", patched["spec"])
	}
	acted, err = VM{}.Act(obj, `return {{operation = "create", resource = {kind = "StageApproval"}}}`, nil)
	if err != nil || !acted.AsList || len(acted.Impacted) != 1 || acted.Impacted[0].Operation != "create" {
		t.Errorf("got %+v, %v", acted, err)
	}
	if _, err := (VM{}).Act(obj, `return {{operation = "delete", resource = obj}}`, nil); err == nil {
		t.Error("an operation Argo CD does not support was accepted")
	}
}

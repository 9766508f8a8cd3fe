package argocd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// shipped is the resource_customizations directory of deploy/argocd.
var shipped = Customizations(filepath.Join("..", "..", "..", "deploy", "argocd", "resource_customizations"))

// object reads a testdata object with the numbers client-go gives (whole numbers int64).
func object(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	asJSON, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	obj := map[string]any{}
	if err := utiljson.Unmarshal(asJSON, &obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return obj
}

// health_test.yaml, in Argo CD's format.
type healthTests struct {
	Tests []struct {
		InputPath    string       `json:"inputPath"`
		HealthStatus HealthStatus `json:"healthStatus"`
	} `json:"tests"`
}

// Every health.lua against its health_test.yaml, as Argo CD's TestLuaHealthScript runs
// them, both with open libraries (a built-in script upstream) and without (argocd-cm's
// default).
func TestHealthScriptsGiveWhatTheirTestsSay(t *testing.T) {
	kinds, err := shipped.Kinds()
	if err != nil || len(kinds) == 0 {
		t.Fatalf("no health scripts in %s: %v", shipped, err)
	}
	for _, gk := range kinds {
		dir := filepath.Join(string(shipped), gk[0], gk[1])
		script, err := shipped.Health(gk[0], gk[1])
		if err != nil {
			t.Fatal(err)
		}
		var tests healthTests
		readYAML(t, filepath.Join(dir, "health_test.yaml"), &tests)
		if len(tests.Tests) == 0 {
			t.Errorf("%s: health_test.yaml has no tests", dir)
		}
		for _, test := range tests.Tests {
			obj := object(t, filepath.Join(dir, test.InputPath))
			for _, vm := range []VM{{OpenLibs: false}, {OpenLibs: true}} {
				got, err := vm.Health(obj, script)
				if err != nil {
					t.Errorf("%s/%s (open libs %v): %v", gk[1], test.InputPath, vm.OpenLibs, err)
					continue
				}
				if got != test.HealthStatus {
					t.Errorf("%s/%s (open libs %v):\n got  %+v\n want %+v", gk[1], test.InputPath, vm.OpenLibs, got, test.HealthStatus)
				}
			}
		}
	}
}

// action_test.yaml, in Argo CD's format.
type actionTests struct {
	DiscoveryTests []struct {
		InputPath string   `json:"inputPath"`
		Result    []Action `json:"result"`
	} `json:"discoveryTests"`
	ActionTests []struct {
		Action               string            `json:"action"`
		InputPath            string            `json:"inputPath"`
		ExpectedOutputPath   string            `json:"expectedOutputPath"`
		ExpectedErrorMessage string            `json:"expectedErrorMessage"`
		Parameters           map[string]string `json:"parameters"`
	} `json:"actionTests"`
}

// requestAnnotations are set to the time of the request by abort and retry; they are
// checked to be now, then set to a fixed time before comparing (as Argo CD's tests
// normalise restartedAt and the like).
var requestAnnotations = []string{"configrollout.dev/abort", "configrollout.dev/retry"}

const normalisedTime = "0001-01-01T00:00:00Z"

// Every discovery.lua and action.lua against its action_test.yaml, as Argo CD's
// TestLuaResourceActionsScript runs them (no open libraries, as the API server runs
// actions), with two differences: discovery must offer exactly the listed actions
// (Argo CD checks each offered action is listed), and an expected error is a part of
// the message rather than all of it (Lua's messages carry line numbers).
func TestActionScriptsDoWhatTheirTestsSay(t *testing.T) {
	kinds, err := shipped.Kinds()
	if err != nil {
		t.Fatal(err)
	}
	tested := 0
	for _, gk := range kinds {
		group, kind := gk[0], gk[1]
		dir := filepath.Join(string(shipped), group, kind, "actions")
		if _, err := os.Stat(filepath.Join(dir, "action_test.yaml")); os.IsNotExist(err) {
			continue
		}
		var tests actionTests
		readYAML(t, filepath.Join(dir, "action_test.yaml"), &tests)
		discovery, err := shipped.Discovery(group, kind)
		if err != nil {
			t.Fatal(err)
		}
		names, err := shipped.ActionNames(group, kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, test := range tests.DiscoveryTests {
			tested++
			obj := object(t, filepath.Join(dir, test.InputPath))
			offered, err := VM{}.Discover(obj, discovery)
			if err != nil {
				t.Errorf("discovery %s: %v", test.InputPath, err)
				continue
			}
			var got []Action
			for _, action := range offered {
				got = append(got, action)
			}
			sortActions(got)
			want := append([]Action(nil), test.Result...)
			sortActions(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("discovery %s:\n got  %+v\n want %+v", test.InputPath, got, want)
			}
			for _, action := range got {
				if !contains(names, action.Name) {
					t.Errorf("discovery offers %s, which has no actions/%s/action.lua", action.Name, action.Name)
				}
			}
		}
		covered := map[string]bool{}
		for _, test := range tests.ActionTests {
			tested++
			covered[test.Action] = true
			name := test.Action + " on " + test.InputPath
			script, err := shipped.Action(group, kind, test.Action)
			if err != nil {
				t.Fatal(err)
			}
			obj := object(t, filepath.Join(dir, test.InputPath))
			acted, err := VM{}.Act(obj, script, test.Parameters)
			if test.ExpectedErrorMessage != "" {
				if err == nil || !strings.Contains(err.Error(), test.ExpectedErrorMessage) {
					t.Errorf("%s: got error %v, want one saying %q", name, err, test.ExpectedErrorMessage)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			checkActionOutput(t, name, acted, filepath.Join(dir, test.ExpectedOutputPath))
		}
		for _, action := range names {
			if !covered[action] {
				t.Errorf("%s/%s: action %s has no test in action_test.yaml", group, kind, action)
			}
		}
	}
	if tested == 0 {
		t.Fatal("no action tests found")
	}
}

// checkActionOutput compares what an action returned with its expected output: the whole
// modified object for a patch (Argo CD's old-style action), or a list of
// {k8sOperation, unstructuredObj} for a list of operations.
func checkActionOutput(t *testing.T, name string, acted Acted, expectedPath string) {
	t.Helper()
	raw, err := os.ReadFile(expectedPath)
	if err != nil {
		t.Fatal(err)
	}
	type expected struct {
		Operation string         `json:"k8sOperation"`
		Object    map[string]any `json:"unstructuredObj"`
	}
	var want []expected
	asList := strings.HasPrefix(strings.TrimSpace(string(raw)), "-")
	if asList {
		readYAML(t, expectedPath, &want)
	} else {
		want = []expected{{Operation: "patch", Object: object(t, expectedPath)}}
	}
	if acted.AsList != asList {
		t.Errorf("%s: returned a list %v, expected one %v", name, acted.AsList, asList)
	}
	impacted := acted.Impacted
	if len(impacted) != len(want) {
		t.Errorf("%s: %d operations, want %d", name, len(impacted), len(want))
		return
	}
	for i := range impacted {
		got := normalised(t, name, impacted[i].Resource)
		wanted := normalised(t, name, want[i].Object)
		if impacted[i].Operation != want[i].Operation || !reflect.DeepEqual(got, wanted) {
			gotJSON, _ := json.MarshalIndent(got, "", "  ")
			wantJSON, _ := json.MarshalIndent(wanted, "", "  ")
			t.Errorf("%s: operation %d:\n got  %s %s\n want %s %s", name, i, impacted[i].Operation, gotJSON, want[i].Operation, wantJSON)
		}
	}
}

// normalised is obj through JSON (one number type), with the request annotations checked
// to be a time within a minute of now and then fixed.
func normalised(t *testing.T, name string, obj map[string]any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	metadata, _ := out["metadata"].(map[string]any)
	annotations, _ := metadata["annotations"].(map[string]any)
	for _, key := range requestAnnotations {
		value, ok := annotations[key].(string)
		if !ok || value == normalisedTime {
			continue
		}
		at, err := time.Parse(time.RFC3339, value)
		if err != nil {
			t.Errorf("%s: %s is not an RFC 3339 time: %v", name, key, err)
		} else if since := time.Since(at); since < -time.Minute || since > time.Minute {
			t.Errorf("%s: %s is %s, not now", name, key, value)
		}
		annotations[key] = normalisedTime
	}
	return out
}

// The argocd-cm committed in deploy/argocd is the one the scripts render.
func TestTheArgoCDConfigMapCarriesTheShippedScripts(t *testing.T) {
	path := filepath.Join(string(shipped), "..", "argocd-cm.yaml")
	committed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header := string(committed)
	if i := strings.Index(header, "apiVersion:"); i >= 0 {
		header = header[:i]
	}
	rendered, err := shipped.ConfigMap(header)
	if err != nil {
		t.Fatal(err)
	}
	if rendered != string(committed) {
		t.Errorf("%s differs from the scripts in %s: run `make argocd-cm`", path, shipped)
	}
	// And Argo CD reads back exactly the scripts from it.
	var cm struct {
		Data map[string]string `json:"data"`
	}
	readYAML(t, path, &cm)
	for _, gk := range mustKinds(t) {
		key := ConfigMapKey(gk[0], gk[1])
		health, _ := shipped.Health(gk[0], gk[1])
		if cm.Data["resource.customizations.health."+key] != health {
			t.Errorf("argocd-cm's health script of %s is not health.lua", key)
		}
		names, _ := shipped.ActionNames(gk[0], gk[1])
		if len(names) == 0 {
			continue
		}
		var actions struct {
			Discovery   string `json:"discovery.lua"`
			Definitions []struct {
				Name   string `json:"name"`
				Action string `json:"action.lua"`
			} `json:"definitions"`
		}
		if err := yaml.Unmarshal([]byte(cm.Data["resource.customizations.actions."+key]), &actions); err != nil {
			t.Fatalf("actions of %s: %v", key, err)
		}
		discovery, _ := shipped.Discovery(gk[0], gk[1])
		if actions.Discovery != discovery {
			t.Errorf("argocd-cm's discovery script of %s is not discovery.lua", key)
		}
		if len(actions.Definitions) != len(names) {
			t.Errorf("argocd-cm defines %d actions of %s, want %d", len(actions.Definitions), key, len(names))
		}
		for _, definition := range actions.Definitions {
			script, _ := shipped.Action(gk[0], gk[1], definition.Name)
			if definition.Action != script {
				t.Errorf("argocd-cm's action %s of %s is not its action.lua", definition.Name, key)
			}
		}
	}
}

func mustKinds(t *testing.T) [][2]string {
	t.Helper()
	kinds, err := shipped.Kinds()
	if err != nil {
		t.Fatal(err)
	}
	return kinds
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func sortActions(actions []Action) {
	sort.Slice(actions, func(i, j int) bool { return actions[i].Name < actions[j].Name })
}

func contains(list []string, value string) bool {
	for _, item := range list {
		if item == value {
			return true
		}
	}
	return false
}

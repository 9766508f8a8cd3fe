// Command gitops-health judges ConfigRollouts and Regions as the GitOps tools do, for the
// lab's tests (e2e/tests) and by hand:
//
//	gitops-health judge --customizations DIR FILE...
//	    one JSON line per object: kstatus (cli-utils status.Compute, what Flux and kpt
//	    run), the shipped Argo CD health.lua, and the actions its discovery.lua enables
//	gitops-health act --customizations DIR --action NAME [--approver USER] FILE
//	    what Argo CD would do for the action: {"operations": [{"operation": "create",
//	    "resource": {...}} | {"operation": "patch", "patch": {JSON merge patch}}]};
//	    --approver sets the approve action's approver as a platform does in argocd-cm
//	    --testdata prints instead what the action returns, as an expectedOutputPath of
//	    Argo CD's action_test.yaml holds it
//	gitops-health argocd-cm --customizations DIR
//	    the argocd-cm ConfigMap carrying the customizations (deploy/argocd/argocd-cm.yaml)
//	gitops-health testdata --customizations DIR CAPTURED.json...
//	    writes objects the lab's tests captured (CONFIGROLLOUT_GITOPS_CAPTURE) as the
//	    testdata of their kind, <group>/<Kind>/testdata/<label>.yaml (a Region's label
//	    without its "region-" prefix), without metadata.managedFields
//
// Objects are JSON or YAML files ("-" reads standard input).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	jsonpatch "github.com/evanphx/json-patch"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"configrollout.dev/e2e/gitops"
	"configrollout.dev/e2e/gitops/argocd"
)

// ConfigMapHeader heads the rendered argocd-cm.
const ConfigMapHeader = `# Generated from deploy/argocd/resource_customizations by e2e/gitops
# (make argocd-cm): do not edit, edit the scripts there.
#
# The entries Argo CD needs for ConfigRollout and Region health and ConfigRollout actions
# (approve, abort, retry, pause, resume). Merge them into Argo CD's own argocd-cm, e.g.
#   kubectl -n argocd patch configmap argocd-cm --patch-file deploy/argocd/argocd-cm.yaml
# Before that, set the approve action's approver to the identity Argo CD acts as in the
# hub (see docs/features/gitops.md, "With Argo CD").
`

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	flags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dir := flags.String("customizations", "deploy/argocd/resource_customizations", "Argo CD resource_customizations directory")
	action := flags.String("action", "", "action to run (act)")
	approver := flags.String("approver", "", "the approve action's approver (act)")
	asTestdata := flags.Bool("testdata", false, "print what the action returns as action_test.yaml's expected output (act)")
	if err := flags.Parse(os.Args[2:]); err != nil {
		fail(err)
	}
	customizations := argocd.Customizations(*dir)
	switch os.Args[1] {
	case "judge":
		for _, file := range flags.Args() {
			obj := read(file)
			verdict, err := gitops.Judge(obj, customizations)
			if err != nil {
				fail(fmt.Errorf("%s: %w", file, err))
			}
			line, err := json.Marshal(verdict)
			if err != nil {
				fail(err)
			}
			fmt.Println(string(line))
		}
	case "act":
		if *action == "" || flags.NArg() != 1 {
			usage()
		}
		act(customizations, *action, *approver, *asTestdata, read(flags.Arg(0)))
	case "testdata":
		for _, file := range flags.Args() {
			writeTestdata(customizations, file)
		}
	case "argocd-cm":
		rendered, err := customizations.ConfigMap(ConfigMapHeader)
		if err != nil {
			fail(err)
		}
		fmt.Print(rendered)
	default:
		usage()
	}
}

type operation struct {
	Operation string          `json:"operation"`
	Resource  map[string]any  `json:"resource,omitempty"`
	Patch     json.RawMessage `json:"patch,omitempty"`
}

func act(customizations argocd.Customizations, name, approver string, asTestdata bool, obj map[string]any) {
	gvk := (&unstructured.Unstructured{Object: obj}).GroupVersionKind()
	script, err := customizations.Action(gvk.Group, gvk.Kind, name)
	if err != nil {
		fail(err)
	}
	if approver != "" {
		if script, err = gitops.WithApprover(script, approver); err != nil {
			fail(err)
		}
	}
	live, err := json.Marshal(obj)
	if err != nil {
		fail(err)
	}
	acted, err := argocd.VM{}.Act(obj, script, nil)
	if err != nil {
		fail(fmt.Errorf("action %s: %w", name, err))
	}
	if asTestdata {
		printTestdata(acted)
		return
	}
	var out struct {
		Operations []operation `json:"operations"`
	}
	for _, one := range acted.Impacted {
		if one.Operation == "create" {
			out.Operations = append(out.Operations, operation{Operation: "create", Resource: one.Resource})
			continue
		}
		modified, err := json.Marshal(one.Resource)
		if err != nil {
			fail(err)
		}
		// What Argo CD sends: a JSON merge patch from the live object to the returned one.
		patch, err := jsonpatch.CreateMergePatch(live, modified)
		if err != nil {
			fail(err)
		}
		out.Operations = append(out.Operations, operation{Operation: "patch", Patch: patch})
	}
	line, err := json.Marshal(out)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(line))
}

// printTestdata prints impacted as Argo CD's action tests expect it: the modified object
// of an action that returns one, else a list of {k8sOperation, unstructuredObj}.
func printTestdata(acted argocd.Acted) {
	var value any
	if !acted.AsList && len(acted.Impacted) == 1 {
		value = acted.Impacted[0].Resource
	} else {
		var list []map[string]any
		for _, one := range acted.Impacted {
			list = append(list, map[string]any{"k8sOperation": one.Operation, "unstructuredObj": one.Resource})
		}
		value = list
	}
	out, err := yaml.Marshal(value)
	if err != nil {
		fail(err)
	}
	fmt.Print(string(out))
}

func writeTestdata(customizations argocd.Customizations, file string) {
	obj := read(file)
	u := &unstructured.Unstructured{Object: obj}
	u.SetManagedFields(nil)
	gvk := u.GroupVersionKind()
	label := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	if gvk.Kind == "Region" {
		label = strings.TrimPrefix(label, "region-")
	}
	out, err := yaml.Marshal(u.Object)
	if err != nil {
		fail(err)
	}
	path := filepath.Join(string(customizations), gvk.Group, gvk.Kind, "testdata", label+".yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		fail(err)
	}
	fmt.Println("wrote", path)
}

func read(file string) map[string]any {
	var raw []byte
	var err error
	if file == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(file)
	}
	if err != nil {
		fail(err)
	}
	obj, err := gitops.Decode(raw)
	if err != nil {
		fail(fmt.Errorf("%s: %w", file, err))
	}
	return obj
}

func usage() {
	fmt.Fprintln(os.Stderr, strings.TrimSpace(`
usage: gitops-health judge [--customizations DIR] FILE...
       gitops-health act [--customizations DIR] --action NAME [--approver USER] FILE
       gitops-health argocd-cm [--customizations DIR]`))
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gitops-health:", err)
	os.Exit(1)
}

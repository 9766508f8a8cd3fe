package crdcheck

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
)

var regions = schema.GroupVersionResource{Group: "configrollout.dev", Version: "v1alpha1", Resource: "regions"}

// controllerNamespace is the namespace the policy admits; it must be the controller's
// --namespace in deploy/deployment.yaml, which a test below checks.
const controllerNamespace = "configrollout-system"

func regionCredentialsPolicy(t *testing.T) *Policy {
	t.Helper()
	p, err := LoadPolicy(filepath.Join("..", "..", "policies", "region-credentials.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// evaluateAs runs a compiled policy on a CREATE (old nil) or an UPDATE from old. Evaluate
// in policy.go models creation only; Regions are checked on update too.
func evaluateAs(v validating.Validator, gvr schema.GroupVersionResource, obj, old map[string]interface{}) validating.ValidateResult {
	u := &unstructured.Unstructured{Object: obj}
	gvk := u.GroupVersionKind()
	operation := admission.Create
	var oldObject runtime.Object // a nil interface on create, not a nil *Unstructured
	if old != nil {
		operation = admission.Update
		oldObject = &unstructured.Unstructured{Object: old}
	}
	attrs := admission.NewAttributesRecord(u, oldObject, gvk, u.GetNamespace(), u.GetName(), gvr, "",
		operation, nil, false, &user.DefaultInfo{Name: "platform-admin"})
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedObject: u, VersionedOldObject: oldObject, VersionedKind: gvk}
	return v.Validate(context.Background(), gvr, versioned, nil, nil, celconfig.RuntimeCELCostBudget, nil)
}

func TestRegionCredentialsPolicyIsBoundAndMatchesRegionWrites(t *testing.T) {
	p := regionCredentialsPolicy(t)
	if len(p.Bindings) != 1 || p.Bindings[0].Spec.PolicyName != p.Policy.Name {
		t.Fatalf("want one binding of %s, got %+v", p.Policy.Name, p.Bindings)
	}
	actions := p.Bindings[0].Spec.ValidationActions
	if len(actions) != 1 || actions[0] != admissionregistrationv1.Deny {
		t.Fatalf("binding must Deny, has %v", actions)
	}
	if fp := p.Policy.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		t.Fatalf("policy must fail closed, has %v", fp)
	}
	rules := p.Policy.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 {
		t.Fatalf("want one resource rule, got %d", len(rules))
	}
	r := rules[0]
	ops := map[admissionregistrationv1.OperationType]bool{}
	for _, op := range r.Operations {
		ops[op] = true
	}
	if strings.Join(r.APIGroups, ",") != "configrollout.dev" || strings.Join(r.Resources, ",") != "regions" ||
		len(r.Operations) != 2 || !ops[admissionregistrationv1.Create] || !ops[admissionregistrationv1.Update] {
		t.Fatalf("policy must match CREATE and UPDATE of regions.configrollout.dev (not regions/status), matches %+v", r.RuleWithOperations)
	}
}

// The namespace written into the policy is the one the shipped Deployment runs the
// controller in; they must change together.
func TestRegionCredentialsPolicyNamesTheDeployedControllerNamespace(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "--namespace="+controllerNamespace) {
		t.Fatalf("deploy/deployment.yaml does not run the controller with --namespace=%s", controllerNamespace)
	}
	for _, validation := range regionCredentialsPolicy(t).Policy.Spec.Validations {
		if !strings.Contains(validation.Expression, "'"+controllerNamespace+"'") {
			t.Fatalf("policy expression does not admit %s: %s", controllerNamespace, validation.Expression)
		}
	}
}

func TestRegionCredentialsPolicyRefusesSecretsOutsideTheControllerNamespace(t *testing.T) {
	v, err := regionCredentialsPolicy(t).Compile()
	if err != nil {
		t.Fatal(err)
	}
	region := func() map[string]interface{} { return fixture(t, "region.yaml") } // secret in configrollout-system
	inTeamA := func() map[string]interface{} {
		r := region()
		set(t, r, "spec.kubeconfigSecretRef.namespace", "team-a")
		return r
	}
	withoutSecret := func() map[string]interface{} {
		r := region()
		set(t, r, "spec.kubeconfigSecretRef", nil)
		return r
	}
	denied := func(what string, result validating.ValidateResult) {
		t.Helper()
		deniedWith(t, what, result, "spec.kubeconfigSecretRef.namespace must be configrollout-system (the controller's namespace), not team-a")
	}

	admittedBy(t, "creating a Region whose Secret is in configrollout-system", evaluateAs(v, regions, region(), nil))
	admittedBy(t, "updating a Region whose Secret is in configrollout-system", evaluateAs(v, regions, region(), region()))
	admittedBy(t, "creating a Region without a Secret (the hub itself)", evaluateAs(v, regions, withoutSecret(), nil))
	denied("creating a Region whose Secret is in team-a", evaluateAs(v, regions, inTeamA(), nil))
	denied("moving a Region's Secret to team-a", evaluateAs(v, regions, inTeamA(), region()))
}

// A Region's Prometheus credentials come from the controller's namespace too.
func TestRegionCredentialsPolicyRefusesPrometheusSecretsOutsideTheControllerNamespace(t *testing.T) {
	v, err := regionCredentialsPolicy(t).Compile()
	if err != nil {
		t.Fatal(err)
	}
	withAuth := func() map[string]interface{} { return fixture(t, "region-prometheus-auth.yaml") }
	inTeamA := func() map[string]interface{} {
		r := withAuth()
		set(t, r, "spec.prometheus.auth.secretRef.namespace", "team-a")
		return r
	}
	admittedBy(t, "a Region whose Prometheus Secret is in configrollout-system", evaluateAs(v, regions, withAuth(), nil))
	want := "spec.prometheus.auth.secretRef.namespace must be configrollout-system (the controller's namespace), not team-a"
	deniedWith(t, "a Region whose Prometheus Secret is in team-a", evaluateAs(v, regions, inTeamA(), nil), want)
	deniedWith(t, "moving a Region's Prometheus Secret to team-a", evaluateAs(v, regions, inTeamA(), withAuth()), want)
}

func admittedBy(t *testing.T, what string, result validating.ValidateResult) {
	t.Helper()
	for _, d := range result.Decisions {
		if d.Action != validating.ActionAdmit {
			t.Fatalf("%s was refused: %+v", what, d)
		}
	}
}

func deniedWith(t *testing.T, what string, result validating.ValidateResult, want string) {
	t.Helper()
	var denials []validating.PolicyDecision
	for _, d := range result.Decisions {
		if d.Action != validating.ActionAdmit {
			denials = append(denials, d)
		}
	}
	if len(denials) != 1 {
		t.Fatalf("%s: want one denial, got %+v", what, result.Decisions)
	}
	d := denials[0]
	if d.Action != validating.ActionDeny || d.Evaluation != validating.EvalDeny {
		t.Fatalf("%s: want a deny verdict (not an evaluation error), got %+v", what, d)
	}
	if d.Message != want {
		t.Fatalf("%s: message %q, want %q", what, d.Message, want)
	}
	if d.Reason != "Forbidden" {
		t.Fatalf("%s: reason %q, want Forbidden", what, d.Reason)
	}
}

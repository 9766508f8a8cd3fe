package crdcheck

import (
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
)

var stageApprovals = schema.GroupVersionResource{Group: "configrollout.dev", Version: "v1alpha1", Resource: "stageapprovals"}

func approverPolicy(t *testing.T) *Policy {
	t.Helper()
	p, err := LoadPolicy(filepath.Join("..", "..", "policies", "stageapproval-approver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestApproverPolicyIsBoundAndMatchesStageApprovalCreation(t *testing.T) {
	p := approverPolicy(t)
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
	if strings.Join(r.APIGroups, ",") != "configrollout.dev" || strings.Join(r.Resources, ",") != "stageapprovals" ||
		len(r.Operations) != 1 || r.Operations[0] != admissionregistrationv1.Create {
		t.Fatalf("policy must match CREATE of stageapprovals.configrollout.dev, matches %+v", r.RuleWithOperations)
	}
}

func TestApproverPolicyRefusesApprovalsInSomeoneElsesName(t *testing.T) {
	v, err := approverPolicy(t).Compile()
	if err != nil {
		t.Fatal(err)
	}
	approval := func() map[string]interface{} { return fixture(t, "stageapproval.yaml") } // approver alice@example.com

	result := Evaluate(v, stageApprovals, approval(), "alice@example.com")
	for _, d := range result.Decisions {
		if d.Action != validating.ActionAdmit {
			t.Fatalf("alice approving as herself was refused: %+v", d)
		}
	}

	result = Evaluate(v, stageApprovals, approval(), "mallory@example.com")
	if len(result.Decisions) != 1 {
		t.Fatalf("want one decision, got %+v", result.Decisions)
	}
	d := result.Decisions[0]
	if d.Action != validating.ActionDeny || d.Evaluation != validating.EvalDeny {
		t.Fatalf("mallory approving as alice: want a deny verdict (not an evaluation error), got %+v", d)
	}
	want := "spec.approver must be the requesting user mallory@example.com: a StageApproval cannot be created in the name of alice@example.com"
	if d.Message != want {
		t.Fatalf("message %q, want %q", d.Message, want)
	}
	if d.Reason != "Forbidden" {
		t.Fatalf("reason %q, want Forbidden", d.Reason)
	}
}

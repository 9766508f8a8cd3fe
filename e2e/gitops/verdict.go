// Package gitops judges ConfigRollouts and Regions as the GitOps tools do: kstatus
// (sigs.k8s.io/cli-utils' status.Compute, what Flux's health checks and kpt run) and the
// Argo CD health and action scripts shipped in deploy/argocd, run as Argo CD runs them
// (package argocd).
package gitops

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"configrollout.dev/e2e/gitops/argocd"
)

// Verdict is what each tool makes of one object.
type Verdict struct {
	Kind               string `json:"kind"`
	Namespace          string `json:"namespace,omitempty"`
	Name               string `json:"name"`
	Phase              string `json:"phase,omitempty"`
	Generation         int64  `json:"generation"`
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	// Kstatus is status.Compute's status (Current, InProgress, Failed, ...) and message.
	Kstatus Judgement `json:"kstatus"`
	// ArgoCD is the shipped health.lua's answer; empty for a kind without one.
	ArgoCD argocd.HealthStatus `json:"argocd"`
	// Actions are the shipped discovery.lua's actions, name to enabled.
	Actions map[string]bool `json:"actions,omitempty"`
}

// Judgement is a status and its message.
type Judgement struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// Decode reads one object from JSON or YAML with the numbers client-go gives: whole
// numbers as int64, which kstatus requires of metadata.generation and
// status.observedGeneration.
func Decode(raw []byte) (map[string]any, error) {
	asJSON, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	obj := map[string]any{}
	if err := utiljson.Unmarshal(asJSON, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// Kstatus is cli-utils' status.Compute of obj.
func Kstatus(obj map[string]any) (Judgement, error) {
	result, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return Judgement{}, err
	}
	return Judgement{Status: result.Status.String(), Message: result.Message}, nil
}

// Judge runs kstatus and the shipped Argo CD scripts of customizations over obj.
func Judge(obj map[string]any, customizations argocd.Customizations) (Verdict, error) {
	u := &unstructured.Unstructured{Object: obj}
	gvk := u.GroupVersionKind()
	verdict := Verdict{
		Kind:       gvk.Kind,
		Namespace:  u.GetNamespace(),
		Name:       u.GetName(),
		Generation: u.GetGeneration(),
	}
	if phase, found, _ := unstructured.NestedString(obj, "status", "phase"); found {
		verdict.Phase = phase
	}
	if observed, found, err := unstructured.NestedInt64(obj, "status", "observedGeneration"); err == nil && found {
		verdict.ObservedGeneration = &observed
	}
	judgement, err := Kstatus(obj)
	if err != nil {
		return Verdict{}, fmt.Errorf("kstatus: %w", err)
	}
	verdict.Kstatus = judgement

	vm := argocd.VM{}
	health, err := customizations.Health(gvk.Group, gvk.Kind)
	switch {
	case errors.Is(err, argocd.ErrNoScript):
	case err != nil:
		return Verdict{}, err
	default:
		verdict.ArgoCD, err = vm.Health(obj, health)
		if err != nil {
			return Verdict{}, fmt.Errorf("%s/%s health.lua: %w", gvk.Group, gvk.Kind, err)
		}
	}
	discovery, err := customizations.Discovery(gvk.Group, gvk.Kind)
	switch {
	case errors.Is(err, argocd.ErrNoScript):
	case err != nil:
		return Verdict{}, err
	default:
		actions, err := vm.Discover(obj, discovery)
		if err != nil {
			return Verdict{}, fmt.Errorf("%s/%s discovery.lua: %w", gvk.Group, gvk.Kind, err)
		}
		verdict.Actions = map[string]bool{}
		for name, action := range actions {
			verdict.Actions[name] = !action.Disabled
		}
	}
	return verdict, nil
}

// ApproverLine is how the approve action names who creates its StageApproval; a platform
// edits it in argocd-cm to Argo CD's identity for the hub.
const approverPrefix = `local approver = "`

// WithApprover is the approve action's script with the approver a platform would set.
func WithApprover(script, approver string) (string, error) {
	start := strings.Index(script, approverPrefix)
	if start < 0 {
		return "", errors.New("the approve action has no line `local approver = \"...\"`")
	}
	rest := script[start+len(approverPrefix):]
	end := strings.Index(rest, `"`)
	if end < 0 {
		return "", errors.New("the approve action's approver line is not closed")
	}
	return script[:start] + approverPrefix + approver + rest[end:], nil
}

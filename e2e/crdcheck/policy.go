package crdcheck

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

// Policy is a ValidatingAdmissionPolicy and its bindings, read from a policy file.
type Policy struct {
	Policy   *admissionregistrationv1.ValidatingAdmissionPolicy
	Bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// LoadPolicy reads a multi-document YAML file of one policy and its bindings.
func LoadPolicy(file string) (*Policy, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := &Policy{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := reader.Read()
		if err != nil {
			break
		}
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, err
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			out.Policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict(doc, out.Policy); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
		case "ValidatingAdmissionPolicyBinding":
			b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			if err := yaml.UnmarshalStrict(doc, b); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			out.Bindings = append(out.Bindings, b)
		case "":
		default:
			return nil, fmt.Errorf("%s: unexpected kind %s", file, meta.Kind)
		}
	}
	if out.Policy == nil {
		return nil, fmt.Errorf("%s: no ValidatingAdmissionPolicy", file)
	}
	return out, nil
}

// Compile builds the policy's validator the way the apiserver's ValidatingAdmissionPolicy
// plugin does (same CEL environment, same compiler; no params, no match conditions, no
// variables, which our policies do not use).
func (p *Policy) Compile() (validating.Validator, error) {
	spec := p.Policy.Spec
	if spec.ParamKind != nil || len(spec.MatchConditions) > 0 || len(spec.Variables) > 0 || len(spec.AuditAnnotations) > 0 {
		return nil, fmt.Errorf("policy %s uses features this check does not model", p.Policy.Name)
	}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return nil, err
	}
	withAuthorizer := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	withoutAuthorizer := plugincel.OptionalVariableDeclarations{}
	validations := make([]plugincel.ExpressionAccessor, len(spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(spec.Validations))
	for i, v := range spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, withAuthorizer, environment.StoredExpressions),
		nil,
		compiler.CompileCondition(nil, withAuthorizer, environment.StoredExpressions),
		compiler.CompileCondition(messages, withoutAuthorizer, environment.StoredExpressions),
		spec.FailurePolicy,
		nil,
	), nil
}

// Evaluate runs a compiled policy on the creation of obj by user.
func Evaluate(v validating.Validator, gvr schema.GroupVersionResource, obj map[string]interface{}, username string) validating.ValidateResult {
	u := &unstructured.Unstructured{Object: obj}
	gvk := u.GroupVersionKind()
	attrs := admission.NewAttributesRecord(u, nil, gvk, u.GetNamespace(), u.GetName(), gvr, "",
		admission.Create, nil, false, &user.DefaultInfo{Name: username})
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedObject: u, VersionedKind: gvk}
	return v.Validate(context.Background(), gvr, versioned, nil, nil, celconfig.RuntimeCELCostBudget, nil)
}

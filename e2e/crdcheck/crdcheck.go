// Package crdcheck runs the CRDs in crds/ through the apiextensions-apiserver's own
// validation code (the code a kube-apiserver runs on CRD create, and on custom resource
// create and update), in process: structural schema, defaults, CEL compilation and
// estimated cost for the CRDs; defaulting, pruning, OpenAPI validation, list semantics
// and CEL evaluation for objects. The policies in policies/ are compiled and evaluated
// with the apiserver's ValidatingAdmissionPolicy CEL compiler and validator. The lab
// installs the same objects into a real kube-apiserver; this check gives the same
// verdicts in seconds, without one.
package crdcheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// CRD is one CRD file, converted the way the apiserver converts it.
type CRD struct {
	File     string
	Internal *apiextensions.CustomResourceDefinition
}

// LoadDir reads every *.yaml CRD in dir, applies v1 defaults and converts it to the
// internal version, as the apiserver does before validating.
func LoadDir(dir string) ([]CRD, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []CRD
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		v1 := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, v1); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(v1)
		internal := &apiextensions.CustomResourceDefinition{}
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1, internal, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		// What the CRD registry strategy's PrepareForCreate does.
		for _, v := range internal.Spec.Versions {
			if v.Storage {
				internal.Status.StoredVersions = []string{v.Name}
			}
		}
		out = append(out, CRD{File: filepath.Base(file), Internal: internal})
	}
	return out, nil
}

// Schema is the OpenAPI schema of the first version. The internal version keeps a
// schema shared by all versions in spec.validation, as conversion from v1 does when
// there is one version.
func (c CRD) Schema() *apiextensions.JSONSchemaProps {
	if v := c.Internal.Spec.Validation; v != nil {
		return v.OpenAPIV3Schema
	}
	if len(c.Internal.Spec.Versions) > 0 && c.Internal.Spec.Versions[0].Schema != nil {
		return c.Internal.Spec.Versions[0].Schema.OpenAPIV3Schema
	}
	return nil
}

// ValidateCRD is the apiserver's validation of a CRD on create.
func ValidateCRD(crd CRD) field.ErrorList {
	return crdvalidation.ValidateCustomResourceDefinition(context.Background(), crd.Internal)
}

// Kind validates objects of one CRD version as the apiserver's custom resource
// registry does.
type Kind struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// NewKind prepares validation for the first served version of crd.
func NewKind(crd CRD) (*Kind, error) {
	props := crd.Schema()
	if props == nil {
		return nil, fmt.Errorf("%s: no schema", crd.File)
	}
	structural, err := structuralschema.NewStructural(props)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", crd.File, err)
	}
	schema, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", crd.File, err)
	}
	return &Kind{
		structural: structural,
		schema:     schema,
		cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
	}, nil
}

// Admit decodes obj as the apiserver does (defaults, pruning) and validates it, on
// create when old is nil, else as an update from old. It returns the defaulted object
// and the errors the apiserver would answer with.
func (k *Kind) Admit(obj, old map[string]interface{}) (map[string]interface{}, field.ErrorList) {
	prepare := func(o map[string]interface{}) {
		structuraldefaulting.Default(o, k.structural)
		structuralpruning.Prune(o, k.structural, true)
	}
	prepare(obj)
	var errs field.ErrorList
	if old == nil {
		errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, k.schema)...)
		errs = append(errs, listtype.ValidateListSetsAndMaps(nil, k.structural, obj)...)
		celErrs, _ := k.cel.Validate(context.Background(), nil, k.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
		return obj, errs
	}
	prepare(old)
	errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, k.schema)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, k.structural, obj)...)
	celErrs, _ := k.cel.Validate(context.Background(), nil, k.structural, obj, old, celconfig.RuntimeCELCostBudget)
	errs = append(errs, celErrs...)
	return obj, errs
}

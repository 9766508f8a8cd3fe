package crdcheck

import (
	"math"
	"sort"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// RuleCost is the apiserver's static cost estimate of one CEL rule: the worst case of
// one evaluation times the most times it can run in one object.
type RuleCost struct {
	Path        string
	Rule        string
	PerCall     uint64
	Cardinality uint64
	Total       uint64
}

// Limits the apiserver applies to the estimates (apiextensions validation).
const (
	PerRuleLimit = crdvalidation.StaticEstimatedCostLimit
	PerCRDLimit  = crdvalidation.StaticEstimatedCRDCostLimit
)

// RuleCosts estimates every rule of crd the way the CRD validation does, most
// expensive first.
func RuleCosts(crd CRD) ([]RuleCost, error) {
	envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	var out []RuleCost
	var walk func(s *apiextensions.JSONSchemaProps, ctx *crdvalidation.CELSchemaContext, path string) error
	walk = func(s *apiextensions.JSONSchemaProps, ctx *crdvalidation.CELSchemaContext, path string) error {
		if len(s.XValidations) > 0 {
			info, err := ctx.TypeInfo()
			if err != nil {
				return err
			}
			results, err := cel.Compile(info.Schema, info.DeclType, celconfig.PerCallLimit, envSet, cel.NewExpressionsEnvLoader())
			if err != nil {
				return err
			}
			for i, r := range results {
				if r.Error != nil {
					return r.Error
				}
				card := r.MaxCardinality
				if ctx.MaxCardinality != nil {
					card = *ctx.MaxCardinality
				}
				out = append(out, RuleCost{Path: path, Rule: s.XValidations[i].Rule, PerCall: r.MaxCost, Cardinality: card, Total: mul(r.MaxCost, card)})
			}
		}
		for name, prop := range s.Properties {
			prop := prop
			if err := walk(&prop, ctx.ChildPropertyContext(&prop, name), path+"."+name); err != nil {
				return err
			}
		}
		if s.Items != nil && s.Items.Schema != nil {
			if err := walk(s.Items.Schema, ctx.ChildItemsContext(s.Items.Schema), path+"[]"); err != nil {
				return err
			}
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			if err := walk(s.AdditionalProperties.Schema, ctx.ChildAdditionalPropertiesContext(s.AdditionalProperties.Schema), path+"{}"); err != nil {
				return err
			}
		}
		return nil
	}
	root := crd.Schema()
	if err := walk(root, crdvalidation.RootCELContext(root), ""); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Total > out[j].Total })
	return out, nil
}

func mul(a, b uint64) uint64 {
	if b != 0 && a > math.MaxUint64/b {
		return math.MaxUint64
	}
	return a * b
}

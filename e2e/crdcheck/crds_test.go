package crdcheck

import (
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"path/filepath"
	"testing"
)

var crdDir = filepath.Join("..", "..", "crds")

func loadCRDs(t *testing.T) map[string]CRD {
	t.Helper()
	crds, err := LoadDir(crdDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 10 {
		t.Fatalf("want 10 CRDs in %s, found %d", crdDir, len(crds))
	}
	byKind := map[string]CRD{}
	for _, crd := range crds {
		byKind[crd.Internal.Spec.Names.Kind] = crd
	}
	return byKind
}

// The apiserver refuses a CRD that is not structural, whose defaults are not pruned or
// invalid, or whose CEL rules do not compile or are estimated over the cost budget.
func TestEveryCRDIsAcceptedByTheAPIServerValidation(t *testing.T) {
	for kind, crd := range loadCRDs(t) {
		if errs := ValidateCRD(crd); len(errs) > 0 {
			for _, err := range errs {
				t.Errorf("%s (%s): %v", crd.File, kind, err)
			}
		}
	}
}

// The check above can fail: a rule naming a field that does not exist is refused.
func TestABrokenRuleIsRefused(t *testing.T) {
	crd := loadCRDs(t)["ConfigRollout"]
	spec := crd.Schema().Properties["spec"]
	spec.XValidations = append(spec.XValidations, apiextensions.ValidationRule{Rule: "self.noSuchField == 1", Message: "x"})
	crd.Schema().Properties["spec"] = spec
	if errs := ValidateCRD(crd); len(errs) == 0 {
		t.Fatal("a CRD with a rule on an undefined field was accepted")
	}
}

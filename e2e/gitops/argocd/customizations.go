package argocd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Customizations is a directory in Argo CD's resource_customizations layout:
// <group>/<Kind>/health.lua, <group>/<Kind>/actions/discovery.lua and
// <group>/<Kind>/actions/<name>/action.lua.
type Customizations string

// ErrNoScript is returned for a kind or action without a script.
var ErrNoScript = errors.New("no script")

func (c Customizations) read(parts ...string) (string, error) {
	path := filepath.Join(append([]string{string(c)}, parts...)...)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s: %w", path, ErrNoScript)
	}
	if err != nil {
		return "", err
	}
	return string(raw), nil
}

// Health is the health script of group/kind.
func (c Customizations) Health(group, kind string) (string, error) {
	return c.read(group, kind, "health.lua")
}

// Discovery is the action discovery script of group/kind.
func (c Customizations) Discovery(group, kind string) (string, error) {
	return c.read(group, kind, "actions", "discovery.lua")
}

// Action is the script of the action name of group/kind.
func (c Customizations) Action(group, kind, name string) (string, error) {
	return c.read(group, kind, "actions", name, "action.lua")
}

// Kinds are the group/kind pairs with a health script, sorted.
func (c Customizations) Kinds() ([][2]string, error) {
	matches, err := filepath.Glob(filepath.Join(string(c), "*", "*", "health.lua"))
	if err != nil {
		return nil, err
	}
	var kinds [][2]string
	for _, match := range matches {
		kindDir := filepath.Dir(match)
		kinds = append(kinds, [2]string{filepath.Base(filepath.Dir(kindDir)), filepath.Base(kindDir)})
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i][0]+"/"+kinds[i][1] < kinds[j][0]+"/"+kinds[j][1] })
	return kinds, nil
}

// ActionNames are the actions of group/kind that have a script, sorted.
func (c Customizations) ActionNames(group, kind string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(string(c), group, kind, "actions", "*", "action.lua"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, match := range matches {
		names = append(names, filepath.Base(filepath.Dir(match)))
	}
	sort.Strings(names)
	return names, nil
}

// ConfigMapKey is the argocd-cm key suffix of group/kind: "<group>_<Kind>".
func ConfigMapKey(group, kind string) string {
	return group + "_" + kind
}

// ConfigMap renders the argocd-cm entries that carry these customizations
// (resource.customizations.health.<group>_<Kind> and
// resource.customizations.actions.<group>_<Kind>), as a ConfigMap to merge into Argo CD's.
func (c Customizations) ConfigMap(header string) (string, error) {
	kinds, err := c.Kinds()
	if err != nil {
		return "", err
	}
	var out strings.Builder
	out.WriteString(header)
	out.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\n")
	out.WriteString("  labels:\n    app.kubernetes.io/name: argocd-cm\n    app.kubernetes.io/part-of: argocd\ndata:\n")
	for _, gk := range kinds {
		group, kind := gk[0], gk[1]
		health, err := c.Health(group, kind)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&out, "  resource.customizations.health.%s: |\n", ConfigMapKey(group, kind))
		block(&out, health, 4)
		names, err := c.ActionNames(group, kind)
		if err != nil {
			return "", err
		}
		if len(names) == 0 {
			continue
		}
		discovery, err := c.Discovery(group, kind)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&out, "  resource.customizations.actions.%s: |\n", ConfigMapKey(group, kind))
		out.WriteString("    discovery.lua: |\n")
		block(&out, discovery, 6)
		out.WriteString("    definitions:\n")
		for _, name := range names {
			script, err := c.Action(group, kind, name)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&out, "      - name: %s\n        action.lua: |\n", name)
			block(&out, script, 10)
		}
	}
	return out.String(), nil
}

// block writes text as the body of a YAML literal block scalar indented by indent.
func block(out *strings.Builder, text string, indent int) {
	pad := strings.Repeat(" ", indent)
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if line == "" {
			out.WriteString("\n")
			continue
		}
		out.WriteString(pad + line + "\n")
	}
}

// Package argocd runs Argo CD resource customizations (health.lua, discovery.lua and
// action.lua) the way Argo CD runs them, so that the scripts shipped in
// deploy/argocd/resource_customizations are tested as Argo CD will run them and not in a
// friendlier Lua.
//
// What is reproduced, from Argo CD's util/lua/lua.go (argoproj/argo-cd v3, read in 2026-08):
//   - gopher-lua (github.com/yuin/gopher-lua, the version Argo CD requires) with the standard
//     libraries skipped unless asked for (Argo CD enables them only for its built-in health
//     scripts, and for argocd-cm health scripts with resource.customizations.useOpenLibs;
//     never for actions), and then only the package, base and table libraries opened, and
//     an os module with only time and date, reachable through require("os");
//   - the object as the global `obj` (JSON numbers as Lua numbers) and the action
//     parameters as the global table `actionParams`;
//   - a one second limit on every run;
//   - results read back through layeh.com/gopher-json: a health table whose status must be
//     one of Argo CD's health codes (else Unknown with Argo CD's message), a discovery
//     table of action names, an action's modified object (a patch) or list of
//     {operation, resource} (operation create or patch);
//   - the empty-table repair Argo CD applies to a patched object (Lua cannot tell an empty
//     map from an empty list, so an empty list where the live object had a map is turned
//     back into a map), and the JSON merge patch Argo CD sends for it.
package argocd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	luajson "layeh.com/gopher-json"
)

// HealthStatus is what a health script returns.
type HealthStatus struct {
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
}

// Argo CD's health codes; a script returning anything else is judged Unknown.
var healthCodes = map[string]bool{
	"Unknown": true, "Progressing": true, "Suspended": true, "Healthy": true, "Degraded": true, "Missing": true,
}

// invalidHealthStatus is Argo CD's message for a script that returned an unknown code.
const invalidHealthStatus = "Lua returned an invalid health status"

// Action is one entry of what a discovery script returns.
type Action struct {
	Name        string `json:"name"`
	Disabled    bool   `json:"disabled,omitempty"`
	DisplayName string `json:"displayName,omitempty"`
	IconClass   string `json:"iconClass,omitempty"`
}

// Impacted is one resource an action returns, with what Argo CD does with it.
type Impacted struct {
	// Operation is "create" or "patch".
	Operation string `json:"operation"`
	// Resource is the object to create, or the modified source object to patch.
	Resource map[string]any `json:"resource"`
}

// VM runs scripts. OpenLibs opens Lua's standard libraries, as Argo CD does for its
// built-in health scripts only.
type VM struct {
	OpenLibs bool
}

// runLimit bounds every run, as Argo CD does.
const runLimit = time.Second

func (vm VM) run(obj map[string]any, script string, params map[string]string) (lua.LValue, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: !vm.OpenLibs})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return nil, fmt.Errorf("opening Lua library %s: %w", lib.name, err)
		}
	}
	if err := preloadSafeOs(l, vm.OpenLibs); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	l.SetContext(ctx)

	table := l.CreateTable(0, len(params))
	for name, value := range params {
		table.RawSetH(lua.LString(name), lua.LString(value))
	}
	l.SetGlobal("actionParams", table)
	l.SetGlobal("obj", toLua(l, obj))

	fn, err := l.LoadString(script)
	if err == nil {
		l.Push(fn)
		err = l.PCall(0, lua.MultRet, nil)
	}
	var apiErr *lua.ApiError
	if errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorRun {
		// Argo CD drops the Lua stack trace from what it shows the user.
		apiErr.StackTrace = ""
		err = apiErr
	}
	if err != nil {
		return nil, err
	}
	return l.Get(-1), nil
}

// preloadSafeOs makes require("os") return a module with only os.time and os.date, taken
// from gopher-lua's own os library (Argo CD's safe os copies those two from it). Without
// open libraries there is no global os, as in Argo CD.
func preloadSafeOs(l *lua.LState, openLibs bool) error {
	if err := l.CallByParam(lua.P{Fn: l.NewFunction(lua.OpenOs), NRet: 1, Protect: true}, lua.LString(lua.OsLibName)); err != nil {
		return fmt.Errorf("opening Lua's os library: %w", err)
	}
	full, ok := l.Get(-1).(*lua.LTable)
	l.Pop(1)
	if !ok {
		return errors.New("gopher-lua's os library is not a table")
	}
	safe := map[string]lua.LValue{"time": full.RawGetString("time"), "date": full.RawGetString("date")}
	if !openLibs {
		l.SetGlobal(lua.OsLibName, lua.LNil)
		if loaded, ok := l.GetField(l.Get(lua.RegistryIndex), "_LOADED").(*lua.LTable); ok {
			loaded.RawSetString(lua.OsLibName, lua.LNil)
		}
	}
	l.PreloadModule(lua.OsLibName, func(l *lua.LState) int {
		module := l.NewTable()
		for name, fn := range safe {
			module.RawSetString(name, fn)
		}
		l.Push(module)
		return 1
	})
	return nil
}

// toLua converts a decoded JSON or unstructured value as Argo CD does: numbers (whatever
// their Go type) become Lua numbers, maps and lists tables, anything else nil.
func toLua(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case json.Number:
		return lua.LString(v)
	case string:
		return lua.LString(v)
	case []any:
		table := l.CreateTable(len(v), 0)
		for _, item := range v {
			table.Append(toLua(l, item))
		}
		return table
	case map[string]any:
		table := l.CreateTable(0, len(v))
		for key, item := range v {
			table.RawSetH(lua.LString(key), toLua(l, item))
		}
		return table
	}
	return lua.LNil
}

// Health runs a health script over obj.
func (vm VM) Health(obj map[string]any, script string) (HealthStatus, error) {
	result, err := vm.run(obj, script, nil)
	if err != nil {
		return HealthStatus{}, err
	}
	switch result.Type() {
	case lua.LTNil:
		return HealthStatus{}, nil
	case lua.LTTable:
	default:
		return HealthStatus{}, fmt.Errorf("expect table output from Lua script, not %s", result.Type())
	}
	encoded, err := luajson.Encode(result)
	if err != nil {
		return HealthStatus{}, err
	}
	if string(encoded) == "[]" {
		// An empty table: no health.
		return HealthStatus{}, nil
	}
	var health HealthStatus
	if err := json.Unmarshal(encoded, &health); err != nil {
		return HealthStatus{}, err
	}
	if !healthCodes[health.Status] {
		return HealthStatus{Status: "Unknown", Message: invalidHealthStatus}, nil
	}
	return health, nil
}

// Discover runs a discovery script over obj: the actions it offers, by name.
func (vm VM) Discover(obj map[string]any, script string) (map[string]Action, error) {
	result, err := vm.run(obj, script, nil)
	if err != nil {
		return nil, err
	}
	if result.Type() != lua.LTTable {
		return nil, fmt.Errorf("expect table output from Lua script, not %s", result.Type())
	}
	encoded, err := luajson.Encode(result)
	if err != nil {
		return nil, fmt.Errorf("error in converting to lua table: %w", err)
	}
	actions := map[string]Action{}
	if string(encoded) == "[]" {
		return actions, nil
	}
	entries := map[string]any{}
	if err := json.Unmarshal(encoded, &entries); err != nil {
		return nil, fmt.Errorf("error unmarshaling action table: %w", err)
	}
	for name, entry := range entries {
		action := Action{Name: name}
		if fields, ok := entry.(map[string]any); ok {
			raw, err := json.Marshal(fields)
			if err != nil {
				return nil, err
			}
			if err := json.Unmarshal(raw, &action); err != nil {
				return nil, fmt.Errorf("error unmarshaling resource action: %w", err)
			}
			action.Name = name
		}
		actions[name] = action
	}
	return actions, nil
}

// Acted is what an action script returned.
type Acted struct {
	// Impacted is what Argo CD creates and patches. A patched object has been through
	// Argo CD's empty-table repair against the source object.
	Impacted []Impacted
	// AsList is whether the script returned a list of operations (Argo CD 2.8 and newer)
	// rather than the modified source object.
	AsList bool
}

// Act runs an action script over obj with params.
func (vm VM) Act(obj map[string]any, script string, params map[string]string) (Acted, error) {
	result, err := vm.run(obj, script, params)
	if err != nil {
		return Acted{}, err
	}
	if result.Type() != lua.LTTable {
		return Acted{}, fmt.Errorf("expect table output from Lua script, not %s", result.Type())
	}
	encoded, err := luajson.Encode(result)
	if err != nil {
		return Acted{}, err
	}
	text := strings.TrimSpace(string(encoded))
	if len(text) < 2 {
		return Acted{}, errors.New("Lua output was not a valid json object or array")
	}
	var impacted []Impacted
	asList := text[0] == '[' && text[len(text)-1] == ']'
	if asList {
		if err := json.Unmarshal(encoded, &impacted); err != nil {
			return Acted{}, err
		}
		for _, one := range impacted {
			if one.Operation != "create" && one.Operation != "patch" {
				return Acted{}, fmt.Errorf("unsupported operation: %q", one.Operation)
			}
		}
	} else {
		modified := map[string]any{}
		if err := json.Unmarshal(encoded, &modified); err != nil {
			return Acted{}, err
		}
		impacted = []Impacted{{Operation: "patch", Resource: modified}}
	}
	for i, one := range impacted {
		if one.Operation == "patch" {
			impacted[i].Resource = repairEmptyTables(one.Resource, obj)
		}
	}
	return Acted{Impacted: impacted, AsList: asList}, nil
}

// repairEmptyTables turns an empty list back into an empty map wherever the live object
// held a map at that place, recursively.
func repairEmptyTables(modified, live map[string]any) map[string]any {
	for key, before := range live {
		after, ok := modified[key]
		if !ok {
			continue
		}
		switch now := after.(type) {
		case map[string]any:
			if was, ok := before.(map[string]any); ok {
				modified[key] = repairEmptyTables(now, was)
			}
		case []any:
			switch was := before.(type) {
			case map[string]any:
				if len(now) == 0 {
					modified[key] = map[string]any{}
				}
			case []any:
				modified[key] = repairEmptyList(now, was)
			}
		}
	}
	return modified
}

func repairEmptyList(modified, live []any) []any {
	for i := range modified {
		if i >= len(live) {
			break
		}
		switch now := modified[i].(type) {
		case map[string]any:
			if was, ok := live[i].(map[string]any); ok {
				modified[i] = repairEmptyTables(now, was)
			}
		case []any:
			if was, ok := live[i].([]any); ok {
				modified[i] = repairEmptyList(now, was)
			}
		}
	}
	return modified
}

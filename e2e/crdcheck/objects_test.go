package crdcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var fixtureDir = filepath.Join("..", "..", "api", "tests", "fixtures")

func kinds(t *testing.T) map[string]*Kind {
	t.Helper()
	out := map[string]*Kind{}
	for name, crd := range loadCRDs(t) {
		k, err := NewKind(crd)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = k
	}
	return out
}

func fixture(t *testing.T, name string) map[string]interface{} {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]interface{}{}
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// set replaces the value at a dotted path ("spec.stages.0.name"); a nil value deletes.
func set(t *testing.T, obj map[string]interface{}, path string, value interface{}) {
	t.Helper()
	var at interface{} = obj
	steps := strings.Split(path, ".")
	for i, step := range steps {
		last := i == len(steps)-1
		switch node := at.(type) {
		case map[string]interface{}:
			if last {
				if value == nil {
					delete(node, step)
				} else {
					node[step] = value
				}
				return
			}
			at = node[step]
		case []interface{}:
			idx := 0
			for _, c := range step {
				idx = idx*10 + int(c-'0')
			}
			if last {
				node[idx] = value
				return
			}
			at = node[idx]
		default:
			t.Fatalf("%s: cannot step into %T at %s", path, at, step)
		}
	}
}

func parse(t *testing.T, text string) interface{} {
	t.Helper()
	var v interface{}
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func get(obj map[string]interface{}, path string) interface{} {
	var at interface{} = obj
	for _, step := range strings.Split(path, ".") {
		switch node := at.(type) {
		case map[string]interface{}:
			at = node[step]
		case []interface{}:
			idx := 0
			for _, c := range step {
				idx = idx*10 + int(c-'0')
			}
			if idx >= len(node) {
				return nil
			}
			at = node[idx]
		default:
			return nil
		}
	}
	return at
}

func TestFixturesAreAdmittedAndDefaulted(t *testing.T) {
	k := kinds(t)
	for _, c := range []struct{ kind, file string }{
		{"ConfigRollout", "rollout-basic.yaml"},
		{"ConfigRollout", "rollout-full.yaml"},
		{"Region", "region.yaml"},
		{"Region", "region-prometheus-auth.yaml"},
		{"StageApproval", "stageapproval.yaml"},
		{"ConfigSchema", "configschema.yaml"},
		{"ClusterConfigSchema", "clusterconfigschema.yaml"},
		{"ClusterConfigValidator", "clusterconfigvalidator.yaml"},
		{"ClusterNotificationSink", "clusternotificationsink.yaml"},
		{"GateTemplate", "gatetemplate.yaml"},
		{"ClusterGateTemplate", "clustergatetemplate.yaml"},
		{"ClusterGateTemplate", "clustergatetemplate-job.yaml"},
	} {
		if _, errs := k[c.kind].Admit(fixture(t, c.file), nil); len(errs) > 0 {
			t.Errorf("%s refused: %v", c.file, errs.ToAggregate())
		}
	}
	obj, _ := k["ConfigRollout"].Admit(fixture(t, "rollout-basic.yaml"), nil)
	for path, want := range map[string]interface{}{
		"spec.stages.0.maxParallel":       int64(1),
		"spec.stages.0.approval":          "None",
		"spec.onFailure":                  "Halt",
		"spec.driftPolicy":                "Report",
		"spec.revisionHistoryLimit":       int64(10),
		"spec.strategy.expandContract":    "Auto",
		"spec.strategy.contract.approval": "None",
		"spec.paused":                     false,
	} {
		if got := get(obj, path); got != want {
			t.Errorf("apiserver default of %s: got %#v, want %#v", path, got, want)
		}
	}
	// Read back before the controller writes a status, a rollout or a Region reads
	// observedGeneration 0 against generation 1: kstatus (Flux, kpt) and Argo CD's health
	// check take it as in progress, not as done.
	for kind, file := range map[string]string{"ConfigRollout": "rollout-basic.yaml", "Region": "region.yaml"} {
		unobserved, _ := k[kind].Admit(fixture(t, file), nil)
		if got := get(unobserved, "status.observedGeneration"); got != int64(0) {
			t.Errorf("%s without a status: status.observedGeneration reads %#v, want 0", kind, got)
		}
		written := fixture(t, file)
		set(t, written, "status", parse(t, "{phase: Complete, reachable: true, observedGeneration: 3}"))
		observed, _ := k[kind].Admit(written, nil)
		if got := get(observed, "status.observedGeneration"); got != float64(3) {
			t.Errorf("%s with a status: status.observedGeneration reads %#v, want the written 3", kind, got)
		}
	}
	full, _ := k["ConfigRollout"].Admit(fixture(t, "rollout-full.yaml"), nil)
	if got := get(full, "spec.gates.1.interval"); got != "1m" {
		t.Errorf("apiserver default of gate interval: got %#v", got)
	}
}

type refusal struct {
	name    string
	kind    string
	file    string
	edit    map[string]string // dotted path -> YAML value ("~delete" removes)
	message string            // a substring of the apiserver's error
}

func TestInvalidObjectsAreRefusedWithAMessageNamingTheField(t *testing.T) {
	cases := []refusal{
		{"duplicate stage names", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages.1.name": "canary"}, "spec.stages: stage names must be unique"},
		{"stage named like the contract step", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages.1.name": "contract"}, `spec.stages[].name: "contract" is reserved`},
		{"gate with a query and a template", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.3.query": "up"}, "spec.gates[]: set exactly one of query and template"},
		{"gate with neither query nor template", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.3.template": "~delete"}, "spec.gates[]: set exactly one of query and template"},
		{"template gate with its own condition", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.3.condition": "result < 1"}, "neither with a template"},
		{"template with two providers", "ClusterGateTemplate", "clustergatetemplate.yaml",
			map[string]string{"spec.prometheus": "{query: up, condition: result == 1}"}, "spec: set exactly one of prometheus, web and job"},
		{"template with no provider", "GateTemplate", "gatetemplate.yaml",
			map[string]string{"spec.prometheus": "~delete"}, "spec: set exactly one of prometheus, web and job"},
		{"web check to a plain http host", "ClusterGateTemplate", "clustergatetemplate.yaml",
			map[string]string{"spec.web.url": "http://status.internal/x"}, "web.url: https://, or http:// to a loopback address"},
		{"web header with a value and a Secret", "ClusterGateTemplate", "clustergatetemplate.yaml",
			map[string]string{"spec.web.headers.1.valueFrom": "{name: s, key: k}"}, "headers[]: set exactly one of value and valueFrom"},
		{"duplicate gate names", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.1.name": "error-rate", "spec.stages.1.gates": "[error-rate]"}, "spec.gates: gate names must be unique"},
		{"stage names an undeclared gate", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.stages.0.gates": "[error-rate, saturation]"}, "every gate a stage names must be declared in spec.gates"},
		{"stage gates without any spec.gates", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages.0.gates": "[error-rate]"}, "every gate a stage names must be declared"},
		{"both data and fromConfigMap", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.fromConfigMap": "{name: src}"}, "set exactly one of spec.data or spec.fromConfigMap"},
		{"neither data nor fromConfigMap", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.data": "~delete"}, "set exactly one of spec.data or spec.fromConfigMap"},
		{"fractional duration", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.stages.1.pause.duration": "1.5h"}, "pause.duration must be a duration"},
		{"unit-less interval", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.interval": `"30"`}, "spec.gates[].interval must be a duration"},
		{"negative deadline", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.stages.0.progressDeadline": "-5m"}, "spec.stages[].progressDeadline must be a duration"},
		{"empty initial delay", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.initialDelay": `""`}, "spec.gates[].initialDelay must be a duration"},
		{"contract pause", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.strategy.contract.pause.duration": "5d"}, "pause.duration must be a duration"},
		{"huge stage deadline", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.stages.0.progressDeadline": "999999999999h"}, "spec.stages[].progressDeadline must be at most 8760h"},
		{"huge rollout deadline", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.progressDeadline": "999999999999h"}, "spec.progressDeadline must be at most 8760h"},
		{"huge stage pause", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.stages.1.pause.duration": "999999999999h"}, "pause.duration must be at most 8760h"},
		{"huge contract pause", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.strategy.contract.pause.duration": "9223372036854775807ms"}, "pause.duration must be at most 8760h"},
		{"huge gate interval", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.interval": "999999999999h"}, "spec.gates[].interval must be at most 24h"},
		{"huge initial delay", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.initialDelay": "99999999999999999999999999999s"}, "spec.gates[].initialDelay must be at most 24h"},
		// Past what Go's time.ParseDuration (CEL's duration()) can hold: refused by the
		// rule's own message, not an evaluation error.
		{"deadline past 292 years", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.stages.0.progressDeadline": "2562048h"}, "spec.stages[].progressDeadline must be at most 8760h"},
		{"deadline summing over the ceiling", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.stages.0.progressDeadline": "8000h8000h"}, "spec.stages[].progressDeadline must be at most 8760h"},
		{"interval one ms over", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.interval": "24h1ms"}, "spec.gates[].interval must be at most 24h"},
		{"gate with both condition and compare", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.2.condition": `"result < 1"`}, "set exactly one of condition and compare"},
		{"gate with neither condition nor compare", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.1.condition": "~delete"}, "set exactly one of condition and compare"},
		{"comparison of a query without region", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.2.query": "sum(rate(errors[1m]))"}, "the query must use {{region}}"},
		{"comparison confidence of 100", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.2.compare.confidencePercent": "100"}, "spec.gates[2].compare.confidencePercent"},
		{"comparison step below its floor", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.2.compare.step": "10ms"}, "spec.gates[].compare.step must be at least 1s"},
		{"gate interval below its floor", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.interval": "999ms"}, "spec.gates[].interval must be at least 1s"},
		{"gate count over the ceiling", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.count": "2000000000"}, "spec.gates[0].count"},
		{"failure limit over the ceiling", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.failureLimit": "1001"}, "spec.gates[0].failureLimit"},
		{"inconclusive limit over the ceiling", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.inconclusiveLimit": "1001"}, "spec.gates[0].inconclusiveLimit"},
		{"error limit over the ceiling", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.consecutiveErrorLimit": "1001"}, "spec.gates[0].consecutiveErrorLimit"},
		{"target named like a companion", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.target.name": "payments.configrollout-state"}, "spec.target.name must not end with .configrollout-state"},
		{"target name with no room for its companion", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.target.name": strings.Repeat("a", 234)}, "spec.target.name must be at most 233 characters"},
		{"consumer selector of only DoesNotExist", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.consumers.1.selector": "{matchExpressions: [{key: nope, operator: DoesNotExist}]}"}, "spec.consumers[].selector must name a label it requires"},
		{"consumer selector of only NotIn", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.consumers.1.selector": "{matchExpressions: [{key: tier, operator: NotIn, values: [x]}]}"}, "spec.consumers[].selector must name a label it requires"},
		{"stage selector operator with control characters", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.stages.1.regions.selector.matchExpressions.0.operator": "\"In\\u001b[2J\\rdata: ALL COMPLETE\\r\""}, "spec.stages[1].regions.selector.matchExpressions[0].operator"},
		{"maxParallel over the ceiling", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages.0.maxParallel": "1001"}, "spec.stages[0].maxParallel"},
		{"maxParallel zero", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages.0.maxParallel": "0"}, "spec.stages[0].maxParallel"},
		{"target name not DNS-1123", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.target.name": "Checkout_Flags"}, "spec.target.name must be a DNS-1123 subdomain"},
		{"target namespace with a dot", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.target.namespace": "check.out"}, "spec.target.namespace must be a DNS-1123 label"},
		{"target namespace too long", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.target.namespace": strings.Repeat("a", 64)}, "spec.target.namespace"},
		{"history limit zero", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.revisionHistoryLimit": "0"}, "spec.revisionHistoryLimit"},
		{"history limit over 100", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.revisionHistoryLimit": "101"}, "spec.revisionHistoryLimit"},
		{"no stages", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages": "[]"}, "spec.stages"},
		{"regions by names and selector", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages.0.regions": "{names: [a], selector: {matchLabels: {x: y}}}"}, "exactly one of names (non-empty) or selector"},
		{"regions by neither", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages.0.regions": "{}"}, "exactly one of names (non-empty) or selector"},
		{"regions by empty names", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages.0.regions": "{names: []}"}, "exactly one of names (non-empty) or selector"},
		{"region named twice in a stage", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.stages.1.regions": "{names: [us-east-1, us-east-1]}"}, "spec.stages[1].regions.names[1]"},
		{"consumer by name and selector", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.consumers.0.selector": "{matchLabels: {app: x}}"}, "spec.consumers[]: set exactly one of name or selector"},
		{"consumer by neither", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.consumers.1.selector": "~delete"}, "spec.consumers[]: set exactly one of name or selector"},
		{"consumer of an unknown kind", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.consumers.0.kind": "CronJob"}, "spec.consumers[0].kind"},
		{"data key with a space", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.data": `{"bad key": "1"}`}, "spec.data: keys must be valid ConfigMap keys"},
		{"data key too long", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.data": "{" + strings.Repeat("k", 254) + ": v}"}, "spec.data: keys must be valid ConfigMap keys"},
		{"gate count zero", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.count": "0"}, "spec.gates[0].count"},
		{"negative failure limit", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.failureLimit": "-1"}, "spec.gates[0].failureLimit"},
		{"negative inconclusive limit", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.inconclusiveLimit": "-1"}, "spec.gates[0].inconclusiveLimit"},
		{"unknown onFailure", "ConfigRollout", "rollout-basic.yaml",
			map[string]string{"spec.onFailure": "Retry"}, "spec.onFailure"},
		{"prometheus URL not http", "Region", "region.yaml",
			map[string]string{"spec.prometheus.url": "ftp://prom:9090"}, "spec.prometheus.url must be an absolute http or https URL"},
		{"prometheus URL relative", "Region", "region.yaml",
			map[string]string{"spec.prometheus.url": "/metrics"}, "spec.prometheus.url must be an absolute http or https URL"},
		{"prometheus URL with a user and password", "Region", "region.yaml",
			map[string]string{"spec.prometheus.url": "http://reader:s3cret@prom:9090"}, "spec.prometheus.url must not carry credentials (user:password@): give them in spec.prometheus.auth"},
		{"prometheus URL with a user", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.url": "https://reader@prom:9090/prometheus"}, "spec.prometheus.url must not carry credentials"},
		{"prometheus URL with a token as user", "Region", "region.yaml",
			map[string]string{"spec.prometheus.url": "HTTPS://t0ken:@prom"}, "spec.prometheus.url must not carry credentials"},
		{"prometheus credentials over http", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.url": "http://prom:9090"}, "spec.prometheus.auth needs an https spec.prometheus.url: credentials are never sent in clear"},
		{"prometheus credentials without a Secret", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.auth.secretRef": "~delete"}, "spec.prometheus.auth.secretRef"},
		{"prometheus credentials naming no key", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.auth": "{secretRef: {namespace: configrollout-system, name: p}}"}, "spec.prometheus.auth must name at least one key"},
		{"prometheus user without password", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.auth.passwordKey": "~delete"}, "spec.prometheus.auth: set usernameKey and passwordKey together"},
		{"prometheus bearer token and basic auth", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.auth.bearerTokenKey": "token"}, "spec.prometheus.auth: set bearerTokenKey or usernameKey and passwordKey, not both"},
		{"prometheus credential key with a slash", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.auth.caKey": "certs/ca.crt"}, "spec.prometheus.auth.caKey must be a valid Secret key"},
		{"prometheus Secret name not a DNS subdomain", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.auth.secretRef.name": "Prometheus_Creds"}, "spec.prometheus.auth.secretRef.name must be a DNS-1123 subdomain"},
		{"prometheus header Authorization", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.headers.0.name": "authorization"}, "spec.prometheus.headers[].name cannot be Authorization"},
		{"prometheus header hop-by-hop", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.headers.1.name": "Transfer-Encoding"}, "spec.prometheus.headers[].name cannot be Authorization"},
		{"prometheus header name with a value in it", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.headers.0.name": `"X-Scope-OrgID: team-a"`}, "spec.prometheus.headers[].name must be an HTTP header name"},
		{"prometheus header named twice", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.headers.1.name": "x-scope-orgid"}, "spec.prometheus.headers: each header is named once"},
		{"prometheus header with a value and a Secret", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.headers.1.value": "x"}, "spec.prometheus.headers[]: set exactly one of value and valueFrom"},
		{"prometheus header with no value", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.headers.0.value": "~delete"}, "spec.prometheus.headers[]: set exactly one of value and valueFrom"},
		{"prometheus header value with a line break", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.headers.0.value": `"team-a\r\nX-Injected: 1"`}, "spec.prometheus.headers[].value must be printable ASCII"},
		{"prometheus header Secret key with a slash", "Region", "region-prometheus-auth.yaml",
			map[string]string{"spec.prometheus.headers.1.valueFrom.key": "keys/api"}, "spec.prometheus.headers[].valueFrom.key must be a valid Secret key"},
		{"prometheus header from a Secret over http", "Region", "region.yaml",
			map[string]string{"spec.prometheus.headers": "[{name: X-Api-Key, valueFrom: {name: keys, key: api}}]"}, "spec.prometheus.headers[].valueFrom needs an https spec.prometheus.url"},
		{"more than 8 prometheus headers", "Region", "region.yaml",
			map[string]string{"spec.prometheus.headers": "[{name: a, value: v}, {name: b, value: v}, {name: c, value: v}, {name: d, value: v}, {name: e, value: v}, {name: f, value: v}, {name: g, value: v}, {name: h, value: v}, {name: i, value: v}]"}, "spec.prometheus.headers"},
		{"approval of a revision not named rN", "StageApproval", "stageapproval.yaml",
			map[string]string{"spec.revision": "3"}, "spec.revision must be a revision name"},
		{"approval without approver", "StageApproval", "stageapproval.yaml",
			map[string]string{"spec.approver": "~delete"}, "spec.approver"},
		{"gate query with an escape sequence", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.query": "\"up\\e[2J\\rdata: ALL COMPLETE\""}, "spec.gates[0].query in body should match"},
		{"gate condition with a bidirectional override", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.gates.0.condition": "\"result < 1\\u202e\""}, "spec.gates[0].condition in body should match"},
		{"activation query with a bell", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.consumers.0.activationQuery": "\"count(up)\\a\""}, "spec.consumers[0].activationQuery in body should match"},
		{"schema pattern on an integer", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.keys.0.pattern": "'^1'"}, "pattern, minLength and maxLength apply to type String only"},
		{"schema range on a string", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.keys.5.minimum": "1"}, "minimum and maximum apply to types Integer, Number and Duration only"},
		{"schema enum without values", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.keys.2.values": "~delete"}, "type Enum needs values"},
		{"schema values on a string", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.keys.5.values": "[a]"}, "type Enum needs values, and only type Enum takes them"},
		{"schema jsonSchema on a boolean", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.keys.4.jsonSchema": "{type: object}"}, "jsonSchema applies to types Json and Yaml only"},
		{"schema key twice", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.keys.1.name": "rate"}, "spec.keys[1]"},
		{"schema key not a ConfigMap key", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.keys.0.name": "\"a b\""}, "spec.keys[0].name"},
		{"schema unknown type", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.keys.0.type": "Float"}, "spec.keys[0].type"},
		{"schema pattern with an escape sequence", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.keys.5.pattern": "\"^a\\e[2J$\""}, "spec.keys[5].pattern in body should match"},
		{"schema rule with a bidirectional override", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.rules.0.rule": "\"true \\u202e\""}, "spec.rules[0].rule in body should match"},
		{"schema rule message with an escape sequence", "ConfigSchema", "configschema.yaml",
			map[string]string{"spec.rules.0.message": "\"ok\\e[2J\""}, "spec.rules[0].message in body should match"},
		{"validator over plain http to another host", "ClusterConfigValidator", "clusterconfigvalidator.yaml",
			map[string]string{"spec.url": "http://capacity.platform.svc/validate"}, "spec.url: https://, or http:// to a loopback address"},
		{"validator timeout over 30s", "ClusterConfigValidator", "clusterconfigvalidator.yaml",
			map[string]string{"spec.timeoutSeconds": "31"}, "spec.timeoutSeconds"},
		{"sink over plain http to another host", "ClusterNotificationSink", "clusternotificationsink.yaml",
			map[string]string{"spec.url": "http://hooks.example.com/x"}, "spec.url: https://, or http:// to a loopback address"},
		{"sink with both url and urlSecret", "ClusterNotificationSink", "clusternotificationsink.yaml",
			map[string]string{"spec.urlSecret": "{name: slack, key: url}"}, "exactly one of url and urlSecret"},
		{"sink header the controller sets", "ClusterNotificationSink", "clusternotificationsink.yaml",
			map[string]string{"spec.headers.0.name": "X-Configrollout-Signature"}, "the controller sets this header itself"},
		{"sink of an unknown type", "ClusterNotificationSink", "clusternotificationsink.yaml",
			map[string]string{"spec.type": "Pager"}, "spec.type"},
		{"rollout subscribed twice to one sink", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.notifications": "[{sink: oncall}, {sink: oncall, triggers: [Halted]}]"}, "each sink once"},
		{"rollout subscribed to an unknown trigger", "ConfigRollout", "rollout-full.yaml",
			map[string]string{"spec.notifications": "[{sink: oncall, triggers: [Sometimes]}]"}, "spec.notifications[0].triggers[0]"},
		{"approval reason with a carriage return", "StageApproval", "stageapproval.yaml",
			map[string]string{"spec.reason": "\"looks fine\\rAPPROVED BY ADMIN\""}, "spec.reason in body should match"},
	}
	k := kinds(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj := fixture(t, c.file)
			for path, text := range c.edit {
				if text == "~delete" {
					set(t, obj, path, nil)
				} else {
					set(t, obj, path, parse(t, text))
				}
			}
			_, errs := k[c.kind].Admit(obj, nil)
			if len(errs) == 0 {
				t.Fatalf("admitted, want refusal containing %q", c.message)
			}
			all := errs.ToAggregate().Error()
			if !strings.Contains(all, c.message) {
				t.Fatalf("refused with %q, want it to contain %q", all, c.message)
			}
		})
	}
}

// Every duration at its ceiling (and the gate interval at its floor), written in the units a person would use and in others,
// is admitted: the ceilings refuse only what is over them.
// Free text may span lines: a PromQL query or a reason written as a YAML block, with tabs,
// and any printable Unicode, is admitted; only control characters and bidirectional
// overrides are refused.
func TestMultiLineTextIsAdmitted(t *testing.T) {
	k := kinds(t)["ConfigRollout"]
	obj := fixture(t, "rollout-full.yaml")
	set(t, obj, "spec.gates.0.query", parse(t, "\"sum(\\n\\trate(errors_total[5m])\\n) / 2\""))
	set(t, obj, "spec.gates.0.condition", parse(t, "\"result < 0.01 # naïve, 日本\""))
	if _, errs := k.Admit(obj, nil); len(errs) > 0 {
		t.Errorf("refused: %v", errs.ToAggregate())
	}
}

func TestDurationsAtTheirCeilingsAreAdmitted(t *testing.T) {
	k := kinds(t)["ConfigRollout"]
	for _, edit := range []map[string]string{
		{"spec.progressDeadline": "8760h", "spec.stages.0.progressDeadline": "525600m"},
		{"spec.stages.1.pause.duration": "31536000s", "spec.strategy.contract.pause.duration": "8759h59m59s1000ms"},
		{"spec.gates.0.interval": "24h", "spec.gates.0.initialDelay": "86400000ms"},
		{"spec.gates.0.interval": "1s", "spec.gates.0.initialDelay": "0s"},
		{"spec.gates.0.interval": "1000ms"},
		{"spec.gates.0.count": "1000", "spec.gates.0.failureLimit": "1000", "spec.gates.0.inconclusiveLimit": "1000",
			"spec.gates.0.consecutiveErrorLimit": "1000", "spec.stages.1.maxParallel": "1000"},
	} {
		obj := fixture(t, "rollout-full.yaml")
		for path, text := range edit {
			set(t, obj, path, parse(t, text))
		}
		if _, errs := k.Admit(obj, nil); len(errs) > 0 {
			t.Errorf("%v refused: %v", edit, errs.ToAggregate())
		}
	}
}

func TestStageApprovalCannotBeEdited(t *testing.T) {
	k := kinds(t)["StageApproval"]
	old := fixture(t, "stageapproval.yaml")
	edited := fixture(t, "stageapproval.yaml")
	set(t, edited, "spec.stage", "everywhere")
	_, errs := k.Admit(edited, old)
	if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "StageApproval spec is immutable") {
		t.Fatalf("edit of spec.stage: got %v, want the immutability refusal", errs)
	}
	same := fixture(t, "stageapproval.yaml")
	set(t, same, "metadata.labels", map[string]interface{}{"audited": "yes"})
	if _, errs := k.Admit(same, fixture(t, "stageapproval.yaml")); len(errs) > 0 {
		t.Fatalf("metadata-only update refused: %v", errs)
	}
}

// A rollout's target cannot be changed (its state lives beside it in every region);
// everything else of the target, and the rest of the spec, can.
func TestRolloutTargetCannotBeChanged(t *testing.T) {
	k := kinds(t)["ConfigRollout"]
	old := fixture(t, "rollout-basic.yaml")
	for _, path := range []string{"spec.target.name", "spec.target.namespace"} {
		edited := fixture(t, "rollout-basic.yaml")
		set(t, edited, path, "elsewhere")
		_, errs := k.Admit(edited, old)
		if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "spec.target is immutable") {
			t.Fatalf("edit of %s: got %v, want the immutability refusal", path, errs)
		}
	}
	adopting := fixture(t, "rollout-basic.yaml")
	set(t, adopting, "spec.target.adopt", true)
	set(t, adopting, "spec.paused", true)
	if _, errs := k.Admit(adopting, old); len(errs) > 0 {
		t.Fatalf("edit of adopt and paused refused: %v", errs)
	}
}

// The largest rollout the schema admits is still evaluated within the apiserver's
// runtime CEL budget.
func TestLargestRolloutStaysWithinTheRuntimeBudget(t *testing.T) {
	k := kinds(t)["ConfigRollout"]
	obj := fixture(t, "rollout-full.yaml")
	var gates, stages []interface{}
	var gateNames []interface{}
	for i := 0; i < 20; i++ {
		name := "gate-" + strings.Repeat("g", 50) + string(rune('a'+i))
		gateNames = append(gateNames, name)
		gates = append(gates, map[string]interface{}{"name": name, "query": "up", "condition": "result > 0"})
	}
	for i := 0; i < 20; i++ {
		var regions []interface{}
		for r := 0; r < 100; r++ {
			regions = append(regions, strings.Repeat("r", 200)+string(rune('a'+i))+string(rune('a'+r%26))+string(rune('a'+r/26)))
		}
		stages = append(stages, map[string]interface{}{
			"name":    "stage-" + strings.Repeat("s", 50) + string(rune('a'+i)),
			"regions": map[string]interface{}{"names": regions},
			"gates":   gateNames,
		})
	}
	data := map[string]interface{}{}
	for i := 0; i < 1000; i++ {
		data[strings.Repeat("k", 214)+strings.Repeat(string(rune('a'+i%26)), 1+i/26)] = "v"
	}
	set(t, obj, "spec.gates", gates)
	set(t, obj, "spec.stages", stages)
	set(t, obj, "spec.fromConfigMap", nil)
	set(t, obj, "spec.data", data)
	if _, errs := k.Admit(obj, nil); len(errs) > 0 {
		t.Fatalf("largest rollout refused: %v", errs.ToAggregate())
	}
}

// A literal header (a tenant id) needs no https: only values from Secrets do.
func TestLiteralPrometheusHeadersAreAdmittedOverHTTP(t *testing.T) {
	k := kinds(t)["Region"]
	obj := fixture(t, "region.yaml")
	set(t, obj, "spec.prometheus.headers", parse(t, "[{name: X-Scope-OrgID, value: 'team-a|team-b'}, {name: X-Note, value: 'two words'}]"))
	if _, errs := k.Admit(obj, nil); len(errs) > 0 {
		t.Errorf("refused: %v", errs.ToAggregate())
	}
}

// An '@' outside the authority is not a user name: such URLs are admitted, with or
// without credentials from a Secret.
func TestPrometheusURLsWithoutUserinfoAreAdmitted(t *testing.T) {
	k := kinds(t)["Region"]
	for file, urls := range map[string][]string{
		"region.yaml":                 {"http://prom:9090/select/0@tenant", "http://prom:9090/?org=a@b"},
		"region-prometheus-auth.yaml": {"https://prom.example/prometheus", "HTTPS://prom.example:443/p@th"},
	} {
		for _, url := range urls {
			obj := fixture(t, file)
			set(t, obj, "spec.prometheus.url", url)
			if _, errs := k.Admit(obj, nil); len(errs) > 0 {
				t.Errorf("%s in %s refused: %v", url, file, errs.ToAggregate())
			}
		}
	}
}

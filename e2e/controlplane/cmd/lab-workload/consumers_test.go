package main

import (
	"context"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidTimeout(t *testing.T) {
	for value, want := range map[string]bool{
		"1": true, "250": true, "600000": true, "0250": true,
		"0": false, "600001": false, "": false, "-5": false, "+5": false, " 5": false,
		"5ms": false, "1.5": false, "99999999999999999999": false,
	} {
		if got := validTimeout(value); got != want {
			t.Errorf("validTimeout(%q) = %v, want %v", value, got, want)
		}
	}
}

func configMap(revision string, data map[string]string, binary map[string][]byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "c",
			Annotations: map[string]string{revisionAnnotation: revision},
		},
		Data:       data,
		BinaryData: binary,
	}
}

func TestParseConfigKeepsKeyNamesRevisionAndValidity(t *testing.T) {
	got := parseConfig(configMap("r3", map[string]string{"b": "x", "timeout_ms": "0"}, map[string][]byte{"a": []byte("y")}))
	want := loadedConfig{present: true, revision: "r3", keys: []string{"a", "b", "timeout_ms"}, valid: false}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if absent := parseConfig(nil); absent.present || len(absent.keys) != 0 {
		t.Errorf("an absent object is no configuration: %+v", absent)
	}
	if noTimeout := parseConfig(configMap("", map[string]string{"a": "x"}, nil)); !noTimeout.valid {
		t.Error("a configuration without timeout_ms is valid")
	}
}

func newTestWorkload(consumers int) *workload {
	return &workload{
		ctx:            context.Background(),
		region:         "region-1",
		badConfigRatio: 0.5,
		consumers:      make([]consumer, consumers),
		history:        []historyEntry{},
	}
}

func TestBadConfigurationRaisesTheErrorRatioByTheShareOfConsumersOnIt(t *testing.T) {
	w := newTestWorkload(3)
	src := configSource{Namespace: "ns", Name: "c"}
	bad := parseConfig(configMap("r2", map[string]string{"timeout_ms": "0"}, nil))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loadGeneration = 1
	w.activateLocked(0, 1, bad)
	if got := w.effectiveErrorRatioLocked(); got != 0.5/3 {
		t.Errorf("one of three consumers on a bad configuration: ratio %v", got)
	}
	w.errorRatio = 0.4
	if got := w.effectiveErrorRatioLocked(); got != 0.4 {
		t.Errorf("a higher manual ratio wins: %v", got)
	}
	w.errorRatio = 0
	w.stagger = 0
	w.load(src, bad)
	if got := w.effectiveErrorRatioLocked(); got != 0.5 {
		t.Errorf("all consumers on a bad configuration: ratio %v", got)
	}
}

func TestALateActivationOfAnOlderLoadChangesNothing(t *testing.T) {
	w := newTestWorkload(1)
	newer := parseConfig(configMap("r2", nil, nil))
	older := parseConfig(configMap("r1", nil, nil))
	w.activateLocked(0, 2, newer)
	w.activateLocked(0, 1, older)
	if got := w.consumers[0].config.revision; got != "r2" {
		t.Errorf("consumer runs %q, want r2", got)
	}
}

func TestMetricsShowOneRevisionSeriesPerConsumerAndNoValues(t *testing.T) {
	w := newTestWorkload(3)
	w.mu.Lock()
	w.load(configSource{Namespace: "ns", Name: "c"}, parseConfig(configMap("r1", map[string]string{"timeout_ms": "250", "secret": "hunter2"}, nil)))
	w.load(configSource{Namespace: "ns", Name: "c"}, parseConfig(configMap("r2", map[string]string{"timeout_ms": "250", "secret": "hunter2"}, nil)))
	w.mu.Unlock()
	rec := httptest.NewRecorder()
	w.serveMetrics(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for i, c := range []string{"0", "1", "2"} {
		series := `configrollout_lab_consumer_revision{region="region-1",consumer="` + c + `",revision="r2"} 1`
		if !strings.Contains(body, series) {
			t.Errorf("consumer %d: no %s in\n%s", i, series, body)
		}
	}
	if strings.Contains(body, `revision="r1"`) {
		t.Errorf("the replaced revision still has a series:\n%s", body)
	}
	if strings.Contains(body, "hunter2") {
		t.Error("a configuration value reached the metrics")
	}
	hist := httptest.NewRecorder()
	w.serveConfigHistory(hist, httptest.NewRequest("GET", "/config-history", nil))
	if strings.Contains(hist.Body.String(), "hunter2") || !strings.Contains(hist.Body.String(), `"keys":["secret","timeout_ms"]`) {
		t.Errorf("history: %s", hist.Body.String())
	}
}

func TestHistoryKeepsTheLastThousandLoads(t *testing.T) {
	w := newTestWorkload(0)
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := 0; i < historyLimit+5; i++ {
		w.load(configSource{Namespace: "ns", Name: "c"}, parseConfig(nil))
	}
	if len(w.history) != historyLimit {
		t.Errorf("history holds %d loads", len(w.history))
	}
}

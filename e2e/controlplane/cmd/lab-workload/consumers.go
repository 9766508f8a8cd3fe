package main

import (
	"fmt"
	"log"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const (
	// revisionAnnotation is where configrollout names the revision a ConfigMap holds.
	revisionAnnotation = "configrollout.dev/revision"
	// timeoutKey is the one key the workload validates, so that a rollout can ship a
	// value that really breaks it.
	timeoutKey    = "timeout_ms"
	maxTimeoutMS  = 600000
	historyLimit  = 1000
	invalidReason = "must be a decimal integer in 1..600000"
)

// loadedConfig is what the workload keeps of one observed state of its ConfigMap: never
// a value, only the revision, the key names and whether it passed validation.
type loadedConfig struct {
	present  bool
	revision string
	keys     []string
	valid    bool
}

// parseConfig reads a ConfigMap (nil: absent or deleted) the way a consumer would.
func parseConfig(cm *corev1.ConfigMap) loadedConfig {
	if cm == nil {
		return loadedConfig{keys: []string{}, valid: true}
	}
	keys := make([]string, 0, len(cm.Data)+len(cm.BinaryData))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	for k := range cm.BinaryData {
		if _, dup := cm.Data[k]; !dup {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	valid := true
	if v, ok := cm.Data[timeoutKey]; ok {
		valid = validTimeout(v)
	} else if b, ok := cm.BinaryData[timeoutKey]; ok {
		valid = validTimeout(string(b))
	}
	return loadedConfig{
		present:  true,
		revision: cm.Annotations[revisionAnnotation],
		keys:     keys,
		valid:    valid,
	}
}

// validTimeout accepts only plain digits (no sign, no spaces) within 1..600000.
func validTimeout(v string) bool {
	if v == "" || len(v) > 12 {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return err == nil && n >= 1 && n <= maxTimeoutMS
}

// consumer is one simulated instance: the configuration it runs with now.
type consumer struct {
	// generation of the load it activated; a late timer of an older load must not
	// overwrite a newer one.
	generation uint64
	config     loadedConfig
}

// historyEntry is one load as GET /config-history reports it.
type historyEntry struct {
	Time     string   `json:"time"`
	Revision string   `json:"revision"`
	Keys     []string `json:"keys"`
	Present  bool     `json:"present"`
	Valid    bool     `json:"valid"`
}

// load records a new observed state of the source and lets each consumer activate it
// after its stagger. Callers hold w.mu.
func (w *workload) load(src configSource, cfg loadedConfig) {
	w.loadGeneration++
	generation := w.loadGeneration
	now := time.Now()
	w.history = append(w.history, historyEntry{
		Time:     now.UTC().Format(time.RFC3339Nano),
		Revision: cfg.revision,
		Keys:     cfg.keys,
		Present:  cfg.present,
		Valid:    cfg.valid,
	})
	if over := len(w.history) - historyLimit; over > 0 {
		w.history = append([]historyEntry(nil), w.history[over:]...)
	}
	switch {
	case !cfg.present:
		log.Printf("config %s: absent, consumers run without configuration", src)
	case cfg.valid:
		log.Printf("config %s: loaded revision %q, keys %v", src, cfg.revision, cfg.keys)
	default:
		// The key's name, never its value.
		log.Printf("config %s: loaded revision %q, keys %v; key %s is invalid (%s)", src, cfg.revision, cfg.keys, timeoutKey, invalidReason)
	}
	for i := range w.consumers {
		delay := time.Duration(i) * w.stagger
		if delay == 0 {
			w.activateLocked(i, generation, cfg)
			continue
		}
		time.AfterFunc(delay, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.activateLocked(i, generation, cfg)
		})
	}
}

func (w *workload) activateLocked(i int, generation uint64, cfg loadedConfig) {
	c := &w.consumers[i]
	if c.generation >= generation {
		return
	}
	c.generation = generation
	c.config = cfg
}

// effectiveErrorRatioLocked is the share of requests that fail now: the manual setting,
// or the share the consumers on a bad configuration fail, whichever is larger.
func (w *workload) effectiveErrorRatioLocked() float64 {
	if len(w.consumers) == 0 {
		return w.errorRatio
	}
	bad := 0
	for _, c := range w.consumers {
		if c.config.present && !c.config.valid {
			bad++
		}
	}
	fromConfig := w.badConfigRatio * float64(bad) / float64(len(w.consumers))
	return max(w.errorRatio, fromConfig)
}

// writeConsumerMetrics appends the per-consumer series. Callers hold w.mu.
func (w *workload) writeConsumerMetrics(out *metricsWriter) {
	region := escapeLabel(w.region)
	out.header("configrollout_lab_consumers", "gauge", "Simulated consumer instances of the lab workload.")
	out.line("configrollout_lab_consumers{region=\"%s\"} %d", region, len(w.consumers))
	out.header("configrollout_lab_consumer_revision", "gauge", "1 for the revision each consumer activated; no series before a consumer has a configuration.")
	for i, c := range w.consumers {
		if c.config.present {
			out.line("configrollout_lab_consumer_revision{region=\"%s\",consumer=\"%d\",revision=\"%s\"} 1", region, i, escapeLabel(c.config.revision))
		}
	}
	out.header("configrollout_lab_consumer_config_valid", "gauge", "Whether the configuration each consumer activated passed validation (1) or not (0).")
	for i, c := range w.consumers {
		if c.config.present {
			out.line("configrollout_lab_consumer_config_valid{region=\"%s\",consumer=\"%d\"} %d", region, i, boolGauge(c.config.valid))
		}
	}
	out.header("configrollout_lab_config_watch_connected", "gauge", "Whether the watch on the configuration source is established now.")
	out.line("configrollout_lab_config_watch_connected{region=\"%s\"} %d", region, boolGauge(w.connected))
	out.header("configrollout_lab_config_loads_total", "counter", "Observed states of the configuration source (each entry of /config-history).")
	out.line("configrollout_lab_config_loads_total{region=\"%s\"} %d", region, w.loadGeneration)
}

func boolGauge(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s configSource) String() string { return fmt.Sprintf("%s/%s", s.Namespace, s.Name) }

// Command lab-workload stands in for one region's service in the configrollout lab. It
// handles requests at a steady simulated rate and fails a share of them, and it is a
// real consumer of a ConfigMap in its region, so that the controller's metric gates and
// activation counts can be tested end to end.
//
// # Configuration
//
// With --kubeconfig (the region's apiserver; the user needs get/list/watch on
// configmaps), POST /config-source?namespace=NS&name=NAME makes it follow that one
// ConfigMap, replacing any earlier source. It lists and watches the object (field
// selector metadata.name) and, on any failure (the region's apiserver stopped, RBAC not
// bound yet, a closed watch), logs it and tries again with backoff (0.25 s doubling to
// 2 s), re-reading the kubeconfig each time so that it follows a restarted apiserver to
// a new port. It never exits for it.
//
// Every observed change of the object (a new resourceVersion, or its deletion) is a
// load; so is the first observation after POST /config-source, even of an absent object.
// The loaded revision is the annotation configrollout.dev/revision ("" when absent); an
// absent or deleted object is no configuration. --consumers N (default 3) simulated
// consumer instances activate each load in a stagger: consumer i after i*200 ms, so an
// activation count rises 1/N, 2/N, ... N/N. A consumer activates only a load newer than
// the one it runs.
//
// Validation: the key timeout_ms, when present, must be a decimal integer (digits only)
// in 1..600000. A consumer running a configuration with an invalid timeout_ms fails its
// share of requests: the effective error ratio is
//
//	max(manual ratio (POST /error-rate), --bad-config-error-ratio * consumers on a bad configuration / N)
//
// with --bad-config-error-ratio 0.5 by default. Configuration values are never logged
// nor exposed; key names and revisions are.
//
// # Metrics (GET /metrics)
//
//	configrollout_lab_requests_total{region}              counter
//	configrollout_lab_errors_total{region}                counter
//	configrollout_lab_error_ratio_setting{region}         the manual ratio
//	configrollout_lab_effective_error_ratio{region}       the ratio requests fail at now
//	configrollout_lab_consumers{region}                   N
//	configrollout_lab_consumer_revision{region,consumer,revision} 1
//	    one series per consumer that runs a configuration, for its revision; the
//	    series of its previous revision disappears. An activationQuery:
//	    count(configrollout_lab_consumer_revision{region="{{region}}",revision="{{revision}}"})
//	configrollout_lab_consumer_config_valid{region,consumer}  1 or 0, per consumer that
//	    runs a configuration
//	configrollout_lab_config_watch_connected{region}      1 while the watch is established
//	configrollout_lab_config_loads_total{region}          loads so far
//	configrollout_lab_tenant_load{region,namespace}       1 for namespace="tenant-a",
//	    1000 for namespace="tenant-b": the series of two tenants sharing the region's
//	    Prometheus, for gate queries scoped to one of them
//	    (configrollout.dev/gate-label-matchers)
//
// # Control (HTTP, same port)
//
//	GET  /metrics                 Prometheus text format
//	GET  /error-rate              the manual error ratio
//	POST /error-rate?value=0.2    set the manual error ratio (0..1)
//	GET  /config-source           {"namespace","name","connected"}, or null
//	POST /config-source?namespace=NS&name=NAME   follow that ConfigMap
//	GET  /config-history          JSON array, oldest first, of the last 1000 loads:
//	    {"time": RFC 3339 with nanoseconds, "revision": "r3", "keys": ["a","b"] (names
//	    only, sorted; data and binaryData), "present": false for an absent object,
//	    "valid": false when timeout_ms is invalid}
//	GET  /healthz
//
// Once listening it writes a JSON ready file (url, pid) and prints it as one line. It
// exits on SIGTERM, SIGINT, or when its standard input reaches end of file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "lab-workload: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	region := flag.String("region", "", "region this workload serves (required)")
	listen := flag.String("listen", "127.0.0.1:0", "address for metrics and control")
	rate := flag.Float64("requests-per-second", 50, "simulated request rate")
	errorRate := flag.Float64("error-rate", 0, "initial share of requests that fail (0..1)")
	readyFile := flag.String("ready-file", "", "write {url,pid} here once listening")
	exitOnStdinEOF := flag.Bool("exit-on-stdin-eof", true, "stop when standard input reaches end of file")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the region's apiserver, read at every (re)connect; needed for /config-source")
	consumers := flag.Int("consumers", 3, "simulated consumer instances")
	badConfigRatio := flag.Float64("bad-config-error-ratio", 0.5, "share of its requests a consumer on an invalid configuration fails (0..1)")
	stagger := flag.Duration("activation-stagger", 200*time.Millisecond, "consumer i activates a new configuration after i times this")
	flag.Parse()
	if *region == "" {
		return errors.New("--region is required")
	}
	if err := validRatio(*errorRate); err != nil {
		return err
	}
	if err := validRatio(*badConfigRatio); err != nil {
		return fmt.Errorf("--bad-config-error-ratio: %w", err)
	}
	if *consumers < 0 || *stagger < 0 {
		return errors.New("--consumers and --activation-stagger must not be negative")
	}
	log.SetPrefix("lab-workload " + *region + ": ")

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	w := &workload{
		ctx:            ctx,
		region:         *region,
		perSecond:      *rate,
		errorRatio:     *errorRate,
		kubeconfig:     *kubeconfig,
		badConfigRatio: *badConfigRatio,
		stagger:        *stagger,
		consumers:      make([]consumer, *consumers),
		history:        []historyEntry{},
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", w.serveMetrics)
	mux.HandleFunc("/error-rate", w.serveErrorRate)
	mux.HandleFunc("/config-source", w.serveConfigSource)
	mux.HandleFunc("/config-history", w.serveConfigHistory)
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(rw, "ok\n") })
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	if *exitOnStdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	go w.tick(ctx, 100*time.Millisecond)
	serveErr := make(chan error, 1)
	go func() { serveErr <- server.Serve(ln) }()

	ready, err := json.Marshal(map[string]any{
		"region": *region,
		"url":    "http://" + ln.Addr().String(),
		"pid":    os.Getpid(),
	})
	if err != nil {
		return err
	}
	if *readyFile != "" {
		tmp := *readyFile + ".tmp"
		if err := os.WriteFile(tmp, ready, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, *readyFile); err != nil {
			return err
		}
	}
	fmt.Println(string(ready))

	select {
	case <-ctx.Done():
		shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		return server.Shutdown(shutdownCtx)
	case err := <-serveErr:
		return err
	}
}

func validRatio(v float64) error {
	if math.IsNaN(v) || v < 0 || v > 1 {
		return fmt.Errorf("error rate must be within 0..1, got %v", v)
	}
	return nil
}

// workload holds the counters and the consumers. Fractions of a request carry over
// between ticks so that the counters follow the configured rates exactly over time,
// without randomness.
type workload struct {
	ctx            context.Context
	region         string
	perSecond      float64
	kubeconfig     string
	badConfigRatio float64
	stagger        time.Duration

	mu           sync.Mutex
	errorRatio   float64
	requests     uint64
	errors       uint64
	requestCarry float64
	errorCarry   float64

	consumers      []consumer
	history        []historyEntry
	loadGeneration uint64

	source           *configSource
	sourceGeneration uint64
	stopSource       context.CancelFunc
	connected        bool
	// loadedOnce and loadedVersion (uid/resourceVersion, "" for absent) tell a new
	// state of the source from one seen again after a reconnect.
	loadedOnce    bool
	loadedVersion string
}

func (w *workload) tick(ctx context.Context, every time.Duration) {
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			w.advance(now.Sub(last).Seconds())
			last = now
		}
	}
}

func (w *workload) advance(seconds float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.requestCarry += w.perSecond * seconds
	handled := math.Floor(w.requestCarry)
	w.requestCarry -= handled
	w.errorCarry += handled * w.effectiveErrorRatioLocked()
	failed := math.Floor(w.errorCarry)
	w.errorCarry -= failed
	w.requests += uint64(handled)
	w.errors += uint64(failed)
}

func (w *workload) serveMetrics(rw http.ResponseWriter, _ *http.Request) {
	out := &metricsWriter{}
	region := escapeLabel(w.region)
	w.mu.Lock()
	out.header("configrollout_lab_requests_total", "counter", "Requests handled by the lab workload.")
	out.line("configrollout_lab_requests_total{region=\"%s\"} %d", region, w.requests)
	out.header("configrollout_lab_errors_total", "counter", "Requests the lab workload failed.")
	out.line("configrollout_lab_errors_total{region=\"%s\"} %d", region, w.errors)
	out.header("configrollout_lab_error_ratio_setting", "gauge", "The error ratio the workload is set to.")
	out.line("configrollout_lab_error_ratio_setting{region=\"%s\"} %g", region, w.errorRatio)
	out.header("configrollout_lab_effective_error_ratio", "gauge", "The share of requests failing now: the setting, or more from consumers on an invalid configuration.")
	out.line("configrollout_lab_effective_error_ratio{region=\"%s\"} %g", region, w.effectiveErrorRatioLocked())
	w.writeConsumerMetrics(out)
	w.mu.Unlock()
	out.header("configrollout_lab_tenant_load", "gauge", "A load two tenants' services report in the region, so that tenant-scoped gate queries can be told apart from unscoped ones.")
	out.line("configrollout_lab_tenant_load{region=\"%s\",namespace=\"tenant-a\"} 1", region)
	out.line("configrollout_lab_tenant_load{region=\"%s\",namespace=\"tenant-b\"} 1000", region)
	rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = io.WriteString(rw, out.String())
}

// metricsWriter builds a Prometheus text exposition.
type metricsWriter struct{ strings.Builder }

func (m *metricsWriter) header(name, kind, help string) {
	fmt.Fprintf(m, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
}

func (m *metricsWriter) line(format string, args ...any) {
	fmt.Fprintf(m, format+"\n", args...)
}

// escapeLabel escapes a label value for the text format (which is not Go quoting).
func escapeLabel(v string) string {
	return labelEscaper.Replace(v)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func (w *workload) serveErrorRate(rw http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost, http.MethodPut:
		v, err := strconv.ParseFloat(r.URL.Query().Get("value"), 64)
		if err == nil {
			err = validRatio(v)
		}
		if err != nil {
			http.Error(rw, fmt.Sprintf("value: %v", err), http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.errorRatio = v
		w.mu.Unlock()
	default:
		http.Error(rw, "use GET or POST", http.StatusMethodNotAllowed)
		return
	}
	w.mu.Lock()
	ratio := w.errorRatio
	w.mu.Unlock()
	fmt.Fprintf(rw, "%g\n", ratio)
}

// Command lab-workload stands in for one region's service in the configrollout lab. It
// counts requests it handles at a steady rate, fails a settable share of them, and
// serves both counters for Prometheus:
//
//	configrollout_lab_requests_total{region="..."}
//	configrollout_lab_errors_total{region="..."}
//
// Control (HTTP, same port):
//
//	GET  /metrics                 Prometheus text format
//	GET  /error-rate              the current error ratio
//	POST /error-rate?value=0.2    set the error ratio (0..1)
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
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
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
	flag.Parse()
	if *region == "" {
		return errors.New("--region is required")
	}
	if err := validRatio(*errorRate); err != nil {
		return err
	}

	w := &workload{region: *region, perSecond: *rate, errorRatio: *errorRate}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", w.serveMetrics)
	mux.HandleFunc("/error-rate", w.serveErrorRate)
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(rw, "ok\n") })
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
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

// workload holds the counters. Fractions of a request carry over between ticks so that
// the counters follow the configured rates exactly over time, without randomness.
type workload struct {
	region    string
	perSecond float64

	mu           sync.Mutex
	errorRatio   float64
	requests     uint64
	errors       uint64
	requestCarry float64
	errorCarry   float64
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
	w.errorCarry += handled * w.errorRatio
	failed := math.Floor(w.errorCarry)
	w.errorCarry -= failed
	w.requests += uint64(handled)
	w.errors += uint64(failed)
}

func (w *workload) serveMetrics(rw http.ResponseWriter, _ *http.Request) {
	w.mu.Lock()
	requests, errs, ratio := w.requests, w.errors, w.errorRatio
	w.mu.Unlock()
	rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	label := strconv.Quote(w.region)
	fmt.Fprintf(rw, "# HELP configrollout_lab_requests_total Requests handled by the lab workload.\n")
	fmt.Fprintf(rw, "# TYPE configrollout_lab_requests_total counter\n")
	fmt.Fprintf(rw, "configrollout_lab_requests_total{region=%s} %d\n", label, requests)
	fmt.Fprintf(rw, "# HELP configrollout_lab_errors_total Requests the lab workload failed.\n")
	fmt.Fprintf(rw, "# TYPE configrollout_lab_errors_total counter\n")
	fmt.Fprintf(rw, "configrollout_lab_errors_total{region=%s} %d\n", label, errs)
	fmt.Fprintf(rw, "# HELP configrollout_lab_error_ratio_setting The error ratio the workload is set to.\n")
	fmt.Fprintf(rw, "# TYPE configrollout_lab_error_ratio_setting gauge\n")
	fmt.Fprintf(rw, "configrollout_lab_error_ratio_setting{region=%s} %g\n", label, ratio)
}

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

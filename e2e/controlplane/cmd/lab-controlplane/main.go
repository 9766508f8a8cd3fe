// Command lab-controlplane runs one real Kubernetes control plane for the configrollout
// lab: the upstream kube-apiserver (k8s.io/kubernetes, one pinned release) on an etcd
// embedded from go.etcd.io/etcd/server/v3, both on loopback.
//
// Everything it owns lives in --data-dir: etcd data, serving certificates, the
// service-account key, static tokens, chosen ports and one kubeconfig per lab user. A
// second start with the same directory keeps the data, tokens and (when still free)
// ports, so kubeconfigs handed out earlier keep working.
//
// Once /readyz answers it writes ready.json into the data directory and prints the same
// JSON as one line on stdout. It stops cleanly (apiserver, then etcd) on SIGTERM, SIGINT
// or when its standard input reaches end of file, so a parent that dies leaves no orphan.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "lab-controlplane: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data-dir", "", "directory holding all state of this control plane (required)")
	name := flag.String("name", "lab", "cluster name used in kubeconfigs")
	exitOnStdinEOF := flag.Bool("exit-on-stdin-eof", true, "stop when standard input reaches end of file")
	readyTimeout := flag.Duration("ready-timeout", 3*time.Minute, "give up when /readyz has not answered ok by then")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: lab-controlplane --data-dir DIR [--name NAME] [-- extra kube-apiserver flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *dataDir == "" {
		flag.Usage()
		return errors.New("--data-dir is required")
	}
	dir, err := filepath.Abs(*dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}

	state, err := loadOrCreateState(dir)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	// A stale ready file from an earlier run must not be taken for this one, and a
	// stopped control plane must not look ready.
	readyFile := filepath.Join(dir, readyFileName)
	_ = os.Remove(readyFile)
	defer os.Remove(readyFile)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopOnSignals(cancel)
	if *exitOnStdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			klog.Info("standard input closed, stopping")
			cancel()
		}()
	}

	etcd, err := startEtcd(dir, state)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()

	apiserverDone := make(chan error, 1)
	go func() {
		apiserverDone <- runAPIServer(ctx, dir, state, etcd.clientURL, flag.Args())
	}()

	readyCtx, readyCancel := context.WithTimeout(ctx, *readyTimeout)
	ready, err := waitReady(readyCtx, dir, state, apiserverDone)
	readyCancel()
	if err != nil {
		cancel()
		return err
	}
	info, err := writeAccess(dir, *name, state, ready)
	if err != nil {
		cancel()
		return err
	}
	line, err := json.Marshal(info)
	if err != nil {
		cancel()
		return err
	}
	fmt.Println(string(line))

	select {
	case <-ctx.Done():
		// The apiserver drains its requests before Run returns.
		return <-apiserverDone
	case err := <-apiserverDone:
		if err == nil {
			err = errors.New("kube-apiserver stopped on its own")
		}
		return err
	case err := <-etcd.failed:
		cancel()
		<-apiserverDone
		return fmt.Errorf("etcd failed: %w", err)
	}
}

func stopOnSignals(cancel context.CancelFunc) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-signals
		klog.Infof("received %v, stopping", sig)
		cancel()
		<-signals
		os.Exit(1)
	}()
}

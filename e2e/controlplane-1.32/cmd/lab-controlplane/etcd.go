package main

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/wal" // storage/wal from etcd 3.6 on
)

// etcd 3.5, the release Kubernetes 1.32 requires (go.mod of k8s.io/kubernetes v1.32):
// the same code as the lab's current etcd but for the WAL package's path.

// runningEtcd is the embedded etcd member that stores this control plane's objects.
type runningEtcd struct {
	server    *embed.Etcd
	clientURL string
	failed    <-chan error
}

func startEtcd(dir string, s *state) (*runningEtcd, error) {
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", s.EtcdClientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", s.EtcdPeerPort)}

	// Each WAL segment is preallocated; a lab writes little, and 64 MB per cluster (the
	// default) only fills disks and CI temp directories.
	wal.SegmentSizeBytes = 8 * 1000 * 1000

	cfg := embed.NewConfig()
	cfg.Name = "lab"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, peerURL.String())
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	// A lab on a shared laptop or CI disk: a stop is always graceful or the whole
	// machine goes, so per-write fsync buys nothing but slower starts and tests.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, errors.New("etcd was not ready within 60s")
	}
	return &runningEtcd{server: e, clientURL: clientURL.String(), failed: e.Err()}, nil
}

// Close stops etcd after the apiserver no longer needs it.
func (r *runningEtcd) Close() {
	r.server.Close()
}

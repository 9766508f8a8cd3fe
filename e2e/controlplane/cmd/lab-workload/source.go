package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	minBackoff  = 250 * time.Millisecond
	maxBackoff  = 2 * time.Second
	listTimeout = 10 * time.Second
	// A watch that lasted this long counts as healthy: the next failure starts the
	// backoff from the beginning again.
	healthyWatch = 10 * time.Second
)

// configSource names the ConfigMap the workload follows.
type configSource struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// sourceStatus is what GET /config-source answers.
type sourceStatus struct {
	configSource
	Connected bool `json:"connected"`
}

// serveConfigSource shows or replaces the watched ConfigMap.
func (w *workload) serveConfigSource(rw http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost, http.MethodPut:
		src := configSource{Namespace: r.URL.Query().Get("namespace"), Name: r.URL.Query().Get("name")}
		if src.Namespace == "" || src.Name == "" {
			http.Error(rw, "namespace and name are required", http.StatusBadRequest)
			return
		}
		if w.kubeconfig == "" {
			http.Error(rw, "started without --kubeconfig: no apiserver to watch", http.StatusConflict)
			return
		}
		w.follow(src)
	default:
		http.Error(rw, "use GET or POST", http.StatusMethodNotAllowed)
		return
	}
	w.mu.Lock()
	var body any
	if w.source != nil {
		body = sourceStatus{configSource: *w.source, Connected: w.connected}
	}
	w.mu.Unlock()
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(body)
}

// serveConfigHistory lists every load, oldest first.
func (w *workload) serveConfigHistory(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(rw, "use GET", http.StatusMethodNotAllowed)
		return
	}
	w.mu.Lock()
	history := append([]historyEntry{}, w.history...)
	w.mu.Unlock()
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(history)
}

// follow stops watching the previous source, if any, and starts on src. Its first
// observation is always a load, even of an absent object, so that consumers never keep
// a configuration from a source they no longer follow.
func (w *workload) follow(src configSource) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopSource != nil {
		w.stopSource()
	}
	w.sourceGeneration++
	generation := w.sourceGeneration
	w.source = &src
	w.connected = false
	w.loadedOnce = false
	w.loadedVersion = ""
	ctx, cancel := context.WithCancel(w.ctx)
	w.stopSource = cancel
	log.Printf("config source is now %s", src)
	go w.watchSource(ctx, generation, src)
}

// watchSource lists and watches the one ConfigMap until ctx ends. Any failure (the
// region's apiserver stopped, RBAC not bound yet, a closed watch) is logged and retried
// with backoff; the workload itself never stops for it.
func (w *workload) watchSource(ctx context.Context, generation uint64, src configSource) {
	backoff := minBackoff
	for ctx.Err() == nil {
		started := time.Now()
		err := w.watchOnce(ctx, generation, src)
		w.setConnected(generation, false)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) >= healthyWatch {
			backoff = minBackoff
		}
		if err != nil {
			log.Printf("config %s: %v; retrying in %v", src, err, backoff)
		} else {
			log.Printf("config %s: watch closed; listing again in %v", src, backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// watchOnce reads the kubeconfig afresh (a restarted region may have moved to another
// port, and the lab rewrites the file then), lists the object and watches it from there.
// It returns nil when the watch simply ended.
func (w *workload) watchOnce(ctx context.Context, generation uint64, src configSource) error {
	config, err := clientcmd.BuildConfigFromFlags("", w.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	config.UserAgent = "lab-workload/" + w.region
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	configMaps := client.CoreV1().ConfigMaps(src.Namespace)
	selector := fields.OneTermEqualSelector("metadata.name", src.Name).String()

	listCtx, cancel := context.WithTimeout(ctx, listTimeout)
	list, err := configMaps.List(listCtx, metav1.ListOptions{FieldSelector: selector})
	cancel()
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	var current *corev1.ConfigMap
	for i := range list.Items {
		if list.Items[i].Name == src.Name {
			current = &list.Items[i]
		}
	}
	w.observe(generation, src, current)

	// The server ends the watch after this; the next round lists again.
	timeout := int64(300)
	watcher, err := configMaps.Watch(ctx, metav1.ListOptions{
		FieldSelector:       selector,
		ResourceVersion:     list.ResourceVersion,
		TimeoutSeconds:      &timeout,
		AllowWatchBookmarks: true,
	})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer watcher.Stop()
	w.setConnected(generation, true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case event, ok := <-watcher.ResultChan():
			if !ok {
				return nil
			}
			switch event.Type {
			case watch.Added, watch.Modified:
				if cm, ok := event.Object.(*corev1.ConfigMap); ok {
					w.observe(generation, src, cm)
				}
			case watch.Deleted:
				w.observe(generation, src, nil)
			case watch.Bookmark:
			case watch.Error:
				err := apierrors.FromObject(event.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return nil
				}
				return fmt.Errorf("watch: %w", err)
			default:
				return errors.New("watch: unexpected event " + string(event.Type))
			}
		}
	}
}

// observe turns one observed state into a load unless it is the state already loaded
// (a relist after a reconnect sees the same object again).
func (w *workload) observe(generation uint64, src configSource, cm *corev1.ConfigMap) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if generation != w.sourceGeneration {
		return
	}
	version := ""
	if cm != nil {
		version = string(cm.UID) + "/" + cm.ResourceVersion
	}
	if w.loadedOnce && version == w.loadedVersion {
		return
	}
	w.loadedOnce = true
	w.loadedVersion = version
	w.load(src, parseConfig(cm))
}

func (w *workload) setConnected(generation uint64, connected bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if generation == w.sourceGeneration {
		w.connected = connected
	}
}

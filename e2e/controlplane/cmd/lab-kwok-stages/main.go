// Command lab-kwok-stages writes KWOK's own default stages, as one multi-document YAML
// file, to the path given as its only argument (standard output when there is none).
//
//	lab-kwok-stages [PATH]
//
// The kwok binary reads its stages from --config and has no built-in ones (kwokctl
// writes them for the clusters it makes). The lab passes it this file, so the stages are
// those of the KWOK release in go.mod, never a copy that drifts from it. They are
// node-initialize (a managed node becomes Ready with a large allocatable), node-heartbeat
// (its conditions are refreshed every 20 to 45 s), and pod-ready, pod-complete and
// pod-delete (a scheduled pod turns Running and Ready at once, a Job's pod completes, a
// deleted pod goes without a kubelet).
package main

import (
	"fmt"
	"os"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	if len(os.Args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: lab-kwok-stages [PATH]")
		os.Exit(2)
	}
	stages := []string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeat,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	docs := make([]string, 0, len(stages))
	for _, stage := range stages {
		docs = append(docs, strings.TrimSpace(stage))
	}
	text := strings.Join(docs, "\n---\n") + "\n"
	if len(os.Args) == 1 {
		fmt.Print(text)
		return
	}
	if err := os.WriteFile(os.Args[1], []byte(text), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "lab-kwok-stages: %v\n", err)
		os.Exit(1)
	}
}

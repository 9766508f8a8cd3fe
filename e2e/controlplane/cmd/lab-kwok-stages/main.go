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
// pod-delete (a scheduled pod turns Running and Ready at once, a Job's pod completes
// with exit code 0, a deleted pod goes without a kubelet).
//
// One stage is the lab's own, lab-pod-fail: a Job's pod labelled
// lab.configrollout.dev/exit: "1" fails instead, its containers terminated with exit code
// 1, so that tests get failing Jobs without running anything. It matches the same pods
// as pod-complete; KWOK picks among matching stages by weight, and pod-complete has
// none (0), so lab-pod-fail's weight makes it the only choice for those pods.
package main

import (
	"fmt"
	"os"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

// exitLabel is the pod label that makes a Job's pod fail with exit code 1 in the lab.
const exitLabel = "lab.configrollout.dev/exit"

// labPodFail is pod-complete (kustomize/stage/pod/fast of the KWOK release) for pods
// labelled exitLabel: "1", with phase Failed and exit code 1 instead of Succeeded and 0.
const labPodFail = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: lab-pod-fail
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchLabels:
      ` + exitLabel + `: "1"
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.ownerReferences.[].kind'
      operator: 'In'
      values:
      - 'Job'
  weight: 1
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 1
            finishedAt: {{ $now | Quote }}
            reason: Error
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Failed
`

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
		labPodFail,
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

package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/server/flagz"
	"k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

func certDir(dir string) string { return filepath.Join(dir, "certs") }

// apiserverFlags are the lab's kube-apiserver flags; extra (from after `--`) come last
// and so win.
func apiserverFlags(dir string, s *state, etcdURL string, extra []string) []string {
	flags := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", s.SecurePort),
		"--cert-dir=" + certDir(dir),
		"--token-auth-file=" + tokenFilePath(dir),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + serviceAccountKeyPath(dir),
		"--service-account-signing-key-file=" + serviceAccountKeyPath(dir),
		"--service-cluster-ip-range=10.96.0.0/16",
		// Nothing in a lab competes for the apiserver, and the bootstrap flow-control
		// objects cost start time on every cluster.
		"--enable-priority-and-fairness=false",
		// No kubelet or other apiserver: the kubernetes Service endpoints need no lease.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=0",
	}
	return append(flags, extra...)
}

// runAPIServer runs the upstream kube-apiserver until ctx ends, the way its own cobra
// command does, but with a context this process controls (the command's own signal
// context cannot also end on stdin EOF).
func runAPIServer(ctx context.Context, dir string, s *state, etcdURL string, extra []string) error {
	opts := options.NewServerRunOptions()
	featureGate := opts.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)

	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	namedFlagSets := opts.Flags()
	opts.Flagz = flagz.NamedFlagSetsReader{FlagSets: namedFlagSets}
	for _, f := range namedFlagSets.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(apiserverFlags(dir, s, etcdURL, extra)); err != nil {
		return fmt.Errorf("kube-apiserver flags: %w", err)
	}
	if err := opts.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	if err := logsapi.ValidateAndApply(opts.Logs, featureGate); err != nil {
		return err
	}
	completed, err := opts.Complete(ctx)
	if err != nil {
		return fmt.Errorf("kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return fmt.Errorf("kube-apiserver options: %w", utilerrors.NewAggregate(errs))
	}
	featureGate.(featuregate.MutableFeatureGate).AddMetrics()
	opts.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()
	return app.Run(ctx, completed)
}

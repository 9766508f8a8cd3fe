package main

// The kube-apiserver of Kubernetes 1.32, the oldest hub configrollout supports. Only this
// file and etcd.go differ from ../../../controlplane/cmd/lab-controlplane (the others
// are links to it): the 1.32 API of the apiserver's options and of etcd 3.5.

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	utilversion "k8s.io/component-base/version"
	"k8s.io/component-base/zpages/flagz"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

func certDir(dir string) string { return filepath.Join(dir, "certs") }

// apiserverFlags are the lab's kube-apiserver flags, the same as for the lab's current
// release; extra (from after `--`) come last and so win.
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
		"--enable-priority-and-fairness=false",
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=0",
	}
	return append(flags, extra...)
}

// runAPIServer runs the upstream kube-apiserver until ctx ends, as 1.32's own cobra
// command (app.NewAPIServerCommand) does.
func runAPIServer(ctx context.Context, dir string, s *state, etcdURL string, extra []string) error {
	_, featureGate := featuregate.DefaultComponentGlobalsRegistry.ComponentGlobalsOrRegister(
		featuregate.DefaultKubeComponent, utilversion.DefaultBuildEffectiveVersion(), utilfeature.DefaultMutableFeatureGate)
	opts := options.NewServerRunOptions()

	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	namedFlagSets := opts.Flags()
	opts.Flagz = flagz.NamedFlagSetsReader{FlagSets: namedFlagSets}
	for _, f := range namedFlagSets.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(apiserverFlags(dir, s, etcdURL, extra)); err != nil {
		return fmt.Errorf("kube-apiserver flags: %w", err)
	}
	if err := featuregate.DefaultComponentGlobalsRegistry.Set(); err != nil {
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
	featureGate.AddMetrics()
	return app.Run(ctx, completed)
}

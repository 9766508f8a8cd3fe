# The two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: test deps lint unit soak crds docs crdcheck gitopscheck argocd-cm labcheck lab lab-bench demo controller-bench scale-bench noisy-bench krew chart image

# Installs what the tests need (idempotent), then checks formatting, lints and runs
# every test: unit, property, and the lab's integration tests.
test: deps lint unit crdcheck gitopscheck labcheck

deps:
	bash scripts/install-deps

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

# The lab's scenarios (e2e/tests, one lab per binary) run two at a time (scripts/run-labs);
# everything else as cargo runs it.
unit:
	$(CARGO) test --workspace --locked --exclude configrollout-e2e
	$(CARGO) test --locked -p configrollout-e2e --lib --bins
	CARGO=$(CARGO) bash scripts/run-labs

# The CRDT, engine, hostile-spec, rollout-sequence, approval and tenancy properties at
# 100,000 cases each
# (release build). SOAK_CASES=N changes the count.
SOAK_CASES ?= 100000
soak:
	PROPTEST_CASES=$(SOAK_CASES) $(CARGO) test --locked --release -p configrollout-core \
		--test engine_properties --test hostile_specs --test ownership_properties \
		--test approval_properties --test tenancy_properties
	PROPTEST_CASES=$(SOAK_CASES) $(CARGO) test --locked --release -p configrollout \
		--test crdt_properties --test rollout_sequences --test convergence_properties

# Regenerates crds/ from the Rust types (a test fails when they differ).
crds:
	$(CARGO) run --locked --bin configrollout-crdgen -- crds

# Regenerates docs/reference/ from the code: CRD fields, conditions and reasons, labels and
# annotations, controller flags, plugin commands, metrics and chart values
# (e2e/tests/docs.rs fails when they differ).
docs:
	$(CARGO) run --locked -p configrollout-e2e --bin docs-reference

# Regenerates, from the Helm chart (deploy/chart), its copy of crds/ and the plain files
# of deploy/observability/ (e2e/tests/chart.rs fails when they differ). Builds Helm from
# Go modules (e2e/tools/helm) on first use.
chart:
	$(CARGO) run --locked -p configrollout-e2e --bin chart-files

# Brings up the lab (hub + 3 regions, workloads, Prometheus) for a person, prints how
# to reach it, and runs until Ctrl-C. The first run builds kube-apiserver (minutes).
lab:
	$(CARGO) run --locked -p configrollout-e2e --bin lab -- $(LAB_ARGS)

# Lab start time and control-plane memory, for BENCHMARKS.md.
lab-bench:
	$(CARGO) run --locked -p configrollout-e2e --bin lab-bench -- $(LAB_BENCH_ARGS)

# Runs crds/ and example objects through the apiextensions-apiserver's own validation
# code (structural schema, CEL compile and cost, defaulting, CEL refusals), in process.
crdcheck:
	cd e2e/crdcheck && GOWORK=off go test -count=1 ./...

# The GitOps health checks shipped in deploy/: gofmt and vet of e2e/gitops, then kstatus
# (sigs.k8s.io/cli-utils, what Flux and kpt run) and the Argo CD health and action scripts
# (run as Argo CD runs them, through gopher-lua) over objects taken from the lab, their
# health_test.yaml and action_test.yaml, and deploy/argocd/argocd-cm.yaml being current.
gitopscheck:
	cd e2e/gitops && test -z "$$(gofmt -l .)" && GOWORK=off go vet ./... && GOWORK=off go test -count=1 ./...

# Regenerates deploy/argocd/argocd-cm.yaml from deploy/argocd/resource_customizations
# (make gitopscheck fails when they differ).
argocd-cm:
	cd e2e/gitops && GOWORK=off go run ./cmd/gitops-health argocd-cm \
		--customizations ../../deploy/argocd/resource_customizations > ../../deploy/argocd/argocd-cm.yaml

# The lab's Go programs: gofmt, vet, and the workload's consumer rules (validation,
# error ratio, metrics without values) as unit tests.
labcheck:
	cd e2e/controlplane && test -z "$$(gofmt -l .)" && GOWORK=off go vet ./... && GOWORK=off go test -count=1 ./cmd/...
	cd e2e/controlplane-1.32 && test -z "$$(gofmt -l .)" && GOWORK=off go vet ./...

# The product on the local lab: hub + 3 regions, the controller, a two-stage rollout with
# an approval, shown as it progresses. DEMO_ARGS=--keep leaves it running.
demo: deps
	$(CARGO) build --locked -p configrollout-e2e --bins
	$(CARGO) run --locked -p configrollout-e2e --bin demo -- $(DEMO_ARGS)

# End-to-end figures of the controller on the lab (see BENCHMARKS.md).
controller-bench: deps
	$(CARGO) build --locked --release -p configrollout-e2e --bins
	$(CARGO) run --locked --release -p configrollout-e2e --bin controller-bench -- $(CONTROLLER_BENCH_ARGS)

# The controller at scale on the lab: N rollouts x R regions, two revisions each (memory,
# CPU, completion time, API requests per rollout; see BENCHMARKS.md).
# SCALE_BENCH_ARGS="--rollouts 1000 --regions 3" changes the size.
scale-bench: deps
	$(CARGO) build --locked --release -p configrollout-e2e --bins
	$(CARGO) run --locked --release -p configrollout-e2e --bin scale-bench -- $(SCALE_BENCH_ARGS)

# Noisy neighbours: N rollouts of one namespace sampling 1 s gates against single rollouts
# of another (BENCHMARKS.md). NOISY_BENCH_ARGS="--noisy 500 --runs 5" changes the size.
noisy-bench: deps
	$(CARGO) build --locked --release -p configrollout-e2e --bins
	$(CARGO) run --locked --release -p configrollout-e2e --bin noisy-bench -- $(NOISY_BENCH_ARGS)

# The kubectl plugin's release archive and krew manifest (plugins/krew/), in target/krew/.
# RELEASE_URL is where the archive will be published: make krew RELEASE_URL=https://...
krew:
	RELEASE_URL="$(RELEASE_URL)" bash plugins/krew/package.sh

# The controller image from ./Dockerfile, without a Docker daemon: a release build packed
# onto scratch by buildah (scripts/build-image), tagged configrollout-controller:<version>
# in podman's storage; run it with scripts/podman/podman. e2e/tests/incluster.rs packs its
# debug build through the same script and runs it on the lab as the shipped ServiceAccount.
image: deps
	bash scripts/build-image

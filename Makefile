# make test: vet, staticcheck, build the test control plane (once), and run
# every test with the race detector.

GO          ?= go
K8S_VERSION := 1.37.2
TESTBIN     := $(CURDIR)/.cache/testbin/k8s-$(K8S_VERSION)
# Flux's source-controller, built from its module beside the control plane
# (the version is internal/testbin/sourcecontroller/go.mod's, and
# fluxtest.SourceControllerVersion's).
SC_VERSION  := $(shell sed -n 's/^[[:space:]]*github.com\/fluxcd\/source-controller \(v[^ ]*\).*/\1/p' internal/testbin/sourcecontroller/go.mod)
SCBIN       := $(CURDIR)/.cache/testbin/source-controller-$(SC_VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_FLAGS  ?= -race -count=1 -timeout 20m
# Every package of every module of the workspace (go.work): the core module
# at the root and the nested ones (Kubernetes sources and sinks, helm,
# examples, the test control plane's harness).
PKGS        := github.com/modwatch/modwatch/...

.PHONY: test vet staticcheck api testbin quickstart fmt clean-testbin bench bench-scale tidy release

# The release checks (internal/release: consumers built at three Kubernetes
# minors, a release resolved through a module proxy) are builds, minutes of
# compiling; they run after the rest, so that they do not load the machine
# under the timing of the replicas' envtest suites.
RELEASE_PKGS := github.com/modwatch/modwatch/internal/release/...

test: vet staticcheck api testbin
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test $(TEST_FLAGS) $$($(GO) list $(PKGS) | grep -v '^github.com/modwatch/modwatch/internal/release')
	$(GO) test $(TEST_FLAGS) -timeout 40m $(RELEASE_PKGS)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)

staticcheck:
	$(GO) run $(STATICCHECK) $(PKGS)

# kube-apiserver and etcd, built from their Go modules (internal/testbin),
# once per version: about ten minutes cold on 2 cores, nothing after. Then
# Flux's source-controller and the CRDs its module ships (a few minutes).
# The exported API of every published package against the last release
# (CHANGELOG.md names its commit): each change is listed; an incompatible
# one must be named in CHANGELOG.md's Unreleased section.
api:
	$(GO) run ./internal/release/cmd/release -api

# make release VERSION=vX.Y.Z: every module's requirements on the others set
# to VERSION, the tree checked, CHANGELOG.md's Unreleased section cut, one
# commit and a tag per published module (nothing is pushed).
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z"; exit 2; }
	$(GO) run ./internal/release/cmd/release -version $(VERSION)

testbin:
	@if [ -x $(TESTBIN)/kube-apiserver ] && [ -x $(TESTBIN)/etcd ]; then \
		echo "testbin: using $(TESTBIN)"; \
	else \
		echo "testbin: building kube-apiserver v$(K8S_VERSION) and etcd into $(TESTBIN) (about ten minutes the first time)"; \
		mkdir -p $(TESTBIN).tmp && \
		cd internal/testbin && GOWORK=off $(GO) build -buildvcs=false -o $(TESTBIN).tmp/ ./kube-apiserver ./etcd && \
		rm -rf $(TESTBIN) && mv $(TESTBIN).tmp $(TESTBIN); \
	fi
	@if [ -x $(SCBIN)/source-controller ] && [ -d $(SCBIN)/crds ]; then \
		echo "testbin: using $(SCBIN)"; \
	else \
		echo "testbin: building Flux's source-controller $(SC_VERSION) into $(SCBIN)"; \
		rm -rf $(SCBIN).tmp && mkdir -p $(SCBIN).tmp/crds && \
		cd internal/testbin/sourcecontroller && \
		GOWORK=off $(GO) build -buildvcs=false -o $(SCBIN).tmp/source-controller github.com/fluxcd/source-controller && \
		cp "$$(GOWORK=off $(GO) list -m -f '{{.Dir}}' github.com/fluxcd/source-controller)"/config/crd/bases/*.yaml $(SCBIN).tmp/crds/ && \
		chmod u+w $(SCBIN).tmp/crds/*.yaml && \
		rm -rf $(SCBIN) && mv $(SCBIN).tmp $(SCBIN); \
	fi

clean-testbin:
	rm -rf $(CURDIR)/.cache/testbin

quickstart:
	$(GO) run ./examples/quickstart

# The P1-P7 comparison table (about ten minutes on 2 cores); the table is
# also written to bench-results/table.md. Then the soak and head-of-line
# table (S1, S2, H1; about 25 minutes) in bench-results/soak.md, the
# wide-tree table (sink/dir vs git archive | tar -x) in
# bench-results/widetree.md, a watcher at steady state of 1,000 targets
# (50 remotes) and of 10,000 (100 and 1,000 remotes) in
# bench-results/fleet*.md (make bench-scale adds 100,000 targets on 10,000
# remotes: about ten minutes), the apply sink against the test control plane
# (500 objects: initial, one changed, resync), push → Flux artifact on
# the real source-controller, hinted vs its interval, the failover of a
# crashed replica (time to the lease duration, deliveries made again; 30
# and 300 remotes), and what a checkpoint in ConfigMaps costs (500,
# 2,000 and 8,000 of them).
bench: testbin
	$(GO) run ./internal/bench/watchbench -out bench-results/table.md
	$(GO) run ./internal/bench/soak -out bench-results/soak.md
	$(GO) run ./internal/bench/widetree -out bench-results/widetree.md
	$(GO) run ./internal/bench/fleet -out bench-results/fleet.md
	$(GO) run ./internal/bench/fleet -remotes 100 -per-remote 100 -out bench-results/fleet-10k-100.md
	$(GO) run ./internal/bench/fleet -remotes 1000 -per-remote 10 -out bench-results/fleet-10k-1000.md
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test -run '^$$' -bench BenchmarkApply500 -benchtime 5x ./internal/testenv/sink/apply/ | tee bench-results/apply.txt
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test -run '^$$' -bench BenchmarkPushToArtifact -benchtime 5x ./internal/testenv/sink/fluxreceiver/ | tee bench-results/fluxartifact.txt
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test -run '^$$' -bench BenchmarkFailover -benchtime 2x -timeout 60m ./internal/testenv/watcher/cluster/ | tee bench-results/failover.txt
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test -run '^$$' -bench BenchmarkConfigMapStore -benchtime 1x -timeout 30m ./internal/testenv/watcher/cluster/ | tee bench-results/checkpoints.txt
	$(GO) test -run '^$$' -bench BenchmarkMemoryStoreHeld -benchtime 3x ./watcher/ | tee bench-results/memorystore.txt

fmt:
	gofmt -w $$(git ls-files '*.go')

# go mod tidy in every module. The modules require each other at the last
# release's version, which only go.work resolves to this tree; tidy runs
# outside the workspace on a copy of each go.mod that replaces the others
# with their directories (the same copy release -check tidies with -diff),
# and the module gets the result without those replaces.
tidy:
	$(GO) run ./internal/release/cmd/release -tidy

# The fleet at 100,000 targets on 10,000 remotes, one replica, each of
# three and one that holds every target and owns no remote (half an hour
# to an hour and a half on 2 cores; one replica's start-up took about half
# an hour on a slow day, with a build beside it),
# then the no-change cycle's CPU per remote at 1,000 and 10,000 remotes in
# three alternating rounds (about 12 minutes).
bench-scale:
	$(GO) run ./internal/bench/fleet -remotes 10000 -per-remote 10 -replicas 3 -timeout 60m -out bench-results/fleet-100k.md
	$(GO) run ./internal/bench/fleet -curve 1000,10000 -rounds 3 -per-remote 10 -settle 1s -timeout 60m -out bench-results/fleet-curve.md

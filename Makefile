# make test: vet, staticcheck, build the test control plane (once), and run
# every test with the race detector.

GO          ?= go
K8S_VERSION := 1.37.2
# The binaries make testbin builds are kept outside the clone, one folder a
# version, so that every checkout and CI run of the machine shares them (as
# setup-envtest keeps envtest's): $MODWATCH_TESTBIN, else modwatch/testbin
# in $XDG_CACHE_HOME or ~/.cache (internal/dev/testenv.TestbinRoot).
TESTBIN_ROOT ?= $(or $(MODWATCH_TESTBIN),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/modwatch/testbin)
TESTBIN     := $(TESTBIN_ROOT)/k8s-$(K8S_VERSION)
# Flux's source-controller, built from its module beside the control plane
# (the version is internal/dev/testbin/sourcecontroller/go.mod's, and
# fluxtest.SourceControllerVersion's).
SC_VERSION  := $(shell sed -n 's/^[[:space:]]*github.com\/fluxcd\/source-controller \(v[^ ]*\).*/\1/p' internal/dev/testbin/sourcecontroller/go.mod)
SCBIN       := $(TESTBIN_ROOT)/source-controller-$(SC_VERSION)
# And its kustomize-controller, which applies the artifacts
# (internal/dev/testbin/kustomizecontroller, fluxtest.KustomizeControllerVersion).
KC_VERSION  := $(shell sed -n 's/^[[:space:]]*github.com\/fluxcd\/kustomize-controller \(v[^ ]*\).*/\1/p' internal/dev/testbin/kustomizecontroller/go.mod)
KCBIN       := $(TESTBIN_ROOT)/kustomize-controller-$(KC_VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_FLAGS  ?= -race -count=1 -timeout 20m
# Every package of every module of the workspace (go.work): the core module
# at the root and the nested ones (Kubernetes sources and sinks, helm,
# examples, the test control plane's harness).
PKGS        := github.com/modwatch/modwatch/...

.PHONY: upstream gitsync-e2e test vet staticcheck api testbin quickstart fmt clean-testbin bench bench-scale bench-compare tidy release

# The release checks (internal/dev/release: consumers built at three Kubernetes
# minors, a release resolved through a module proxy) are builds, minutes of
# compiling. They run beside the other tests at the lowest CPU priority
# (nice 19): they take the cores the other tests leave idle while those
# wait on git servers, control planes and timers (about a third of the
# time, docs/performance.md), never the cores those tests want. Their
# output follows the other tests'.
RELEASE_PKGS := github.com/modwatch/modwatch/internal/dev/release/...

# The packages whose tests take longest (go test -json, per package) are
# listed first: go test starts them first, and the rest fill the other
# core around them, instead of one of them running alone at the end.
SLOW_FIRST  := gitutil/mirror watcher internal/dev/testenv/watcher/cluster examples/gitsync internal/dev/testenv/source/gitsync examples/agent
TEST_PKGS    = $(GO) list $(PKGS) | grep -v '^github.com/modwatch/modwatch/internal/dev/release' | \
	awk 'BEGIN { n = split("$(SLOW_FIRST)", s, " "); for (i = 1; i <= n; i++) rank["github.com/modwatch/modwatch/" s[i]] = i } \
	{ print ($$0 in rank ? rank[$$0] : n + 1), $$0 }' | sort -n -s -k1,1 | cut -d' ' -f2

test: vet staticcheck api testbin upstream
	@log=$$(mktemp) && trap 'rm -f "$$log"' EXIT && \
	{ nice -n 19 $(GO) test $(TEST_FLAGS) -timeout 40m $(RELEASE_PKGS) >"$$log" 2>&1 & } && release=$$! && \
	echo "test: the release checks run beside the tests, at nice 19 (pid $$release); their output follows" && \
	{ KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test $(TEST_FLAGS) $$($(TEST_PKGS)); tests=$$?; } && \
	{ wait $$release; rel=$$?; } && cat "$$log" && \
	echo "test: tests exit $$tests, release checks exit $$rel" && [ $$tests -eq 0 ] && [ $$rel -eq 0 ]

# The comparisons of the project's fixtures with the users' own artifacts
# (Numaplane's CRD and samples) run where those are: ../shared/upstream
# beside the clone, or $MODWATCH_UPSTREAM. Elsewhere they skip; this says so.
UPSTREAM_DIR := $(or $(MODWATCH_UPSTREAM),$(abspath $(CURDIR)/../shared/upstream))
upstream:
	@if [ -d "$(UPSTREAM_DIR)/numaplane" ]; then \
		echo "upstream: the fixtures are compared with the users' artifacts in $(UPSTREAM_DIR)"; \
	else \
		echo "SKIP the comparisons of the fixtures with the users' artifacts (Numaplane's CRD and samples): $(UPSTREAM_DIR) is not there; set MODWATCH_UPSTREAM to run them"; \
	fi

# git-sync's own end-to-end suite (all 93 tests, about seven minutes; or
# E2E_TESTS="sync_head readlink") against examples/gitsync, through the
# harness in ../shared/gitsync-e2e, where it is; its summary is in OUT. The
# binary is in a directory its uid (65533) can search: git runs it as its
# credential helper.
GITSYNC_E2E := $(abspath $(CURDIR)/../shared/gitsync-e2e)
gitsync-e2e:
	@if [ -x "$(GITSYNC_E2E)/run.sh" ] && [ -f "$(UPSTREAM_DIR)/git-sync/test_e2e.sh" ]; then \
		dir=$$(mktemp -d) && chmod 755 $$dir && bin=$$dir/git-sync && $(GO) build -o $$bin ./examples/gitsync && \
		out=$${OUT:-$$(mktemp -d)} && echo "gitsync-e2e: results in $$out" && \
		OUT=$$out $(GITSYNC_E2E)/run.sh $$bin $(UPSTREAM_DIR)/git-sync $(E2E_TESTS); \
	else \
		echo "SKIP git-sync's own suite: $(GITSYNC_E2E)/run.sh or $(UPSTREAM_DIR)/git-sync is not there; set MODWATCH_UPSTREAM to the folder that holds git-sync/"; \
	fi

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)

staticcheck:
	$(GO) run $(STATICCHECK) $(PKGS)

# kube-apiserver and etcd, built from their Go modules (internal/dev/testbin),
# once per version: about ten minutes cold on 2 cores, nothing after. Then
# Flux's source-controller and kustomize-controller, and the CRDs their
# modules ship (a few minutes each).
# The exported API of every published package against the last release
# (CHANGELOG.md names its commit): each change is listed; an incompatible
# one must be named in CHANGELOG.md's Unreleased section.
api:
	$(GO) run ./internal/dev/release/cmd/release -api

# make release VERSION=vX.Y.Z: every module's requirements on the others set
# to VERSION, the tree checked, CHANGELOG.md's Unreleased section cut, one
# commit and a tag per published module (nothing is pushed).
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z"; exit 2; }
	$(GO) run ./internal/dev/release/cmd/release -version $(VERSION)

testbin:
	@if [ -x $(TESTBIN)/kube-apiserver ] && [ -x $(TESTBIN)/etcd ]; then \
		echo "testbin: using $(TESTBIN)"; \
	else \
		echo "testbin: building kube-apiserver v$(K8S_VERSION) and etcd into $(TESTBIN) (about ten minutes the first time)"; \
		mkdir -p $(TESTBIN_ROOT) && tmp=$$(mktemp -d $(TESTBIN).tmp.XXXXXX) && \
		cd internal/dev/testbin && GOWORK=off $(GO) build -buildvcs=false -o $$tmp/ ./kube-apiserver ./etcd && \
		rm -rf $(TESTBIN) && mv $$tmp $(TESTBIN); \
	fi
	@if [ -x $(SCBIN)/source-controller ] && [ -d $(SCBIN)/crds ]; then \
		echo "testbin: using $(SCBIN)"; \
	else \
		echo "testbin: building Flux's source-controller $(SC_VERSION) into $(SCBIN)"; \
		mkdir -p $(TESTBIN_ROOT) && tmp=$$(mktemp -d $(SCBIN).tmp.XXXXXX) && mkdir $$tmp/crds && \
		cd internal/dev/testbin/sourcecontroller && \
		GOWORK=off $(GO) build -buildvcs=false -o $$tmp/source-controller github.com/fluxcd/source-controller && \
		cp "$$(GOWORK=off $(GO) list -m -f '{{.Dir}}' github.com/fluxcd/source-controller)"/config/crd/bases/*.yaml $$tmp/crds/ && \
		chmod u+w $$tmp/crds/*.yaml && \
		rm -rf $(SCBIN) && mv $$tmp $(SCBIN); \
	fi
	@if [ -x $(KCBIN)/kustomize-controller ] && [ -d $(KCBIN)/crds ]; then \
		echo "testbin: using $(KCBIN)"; \
	else \
		echo "testbin: building Flux's kustomize-controller $(KC_VERSION) into $(KCBIN)"; \
		mkdir -p $(TESTBIN_ROOT) && tmp=$$(mktemp -d $(KCBIN).tmp.XXXXXX) && mkdir $$tmp/crds && \
		cd internal/dev/testbin/kustomizecontroller && \
		GOWORK=off $(GO) build -buildvcs=false -o $$tmp/kustomize-controller github.com/fluxcd/kustomize-controller && \
		cp "$$(GOWORK=off $(GO) list -m -f '{{.Dir}}' github.com/fluxcd/kustomize-controller)"/config/crd/bases/*.yaml $$tmp/crds/ && \
		chmod u+w $$tmp/crds/*.yaml && \
		rm -rf $(KCBIN) && mv $$tmp $(KCBIN); \
	fi

clean-testbin:
	rm -rf $(TESTBIN) $(SCBIN)

quickstart:
	$(GO) run ./examples/quickstart

# The P1-P7 comparison table (about ten minutes on 2 cores); the table is
# also written to bench-results/table.md. Then the soak and head-of-line
# table (S1, S2, H1; about 25 minutes) in bench-results/soak.md, the
# wide-tree table (sink/dir vs git archive | tar -x) in
# bench-results/widetree.md, one host's requests at a budget of 25 a second
# (P15: the start-up of 1,000 remotes on it against the budget and the
# least time it allows, 80 s; with the same start-up unbudgeted, about
# three minutes) in bench-results/polite.md, a
# watcher at steady state of 1,000 targets
# (50 remotes) and of 10,000 (100 and 1,000 remotes) in
# bench-results/fleet*.md (make bench-scale adds 100,000 targets on 10,000
# remotes: about ten minutes), the apply sink against the test control plane
# (500 objects: initial, one changed, resync), push → Flux artifact on
# the real source-controller, hinted vs its interval, the failover of a
# crashed replica (time to the lease duration, deliveries made again; 30
# and 300 remotes), and what a checkpoint in ConfigMaps costs (500,
# 2,000 and 8,000 of them).
bench: testbin
	$(GO) run ./internal/dev/bench/watchbench -out bench-results/table.md
	$(GO) run ./internal/dev/bench/soak -out bench-results/soak.md
	$(GO) run ./internal/dev/bench/widetree -out bench-results/widetree.md
	$(GO) run ./internal/dev/bench/polite -out bench-results/polite.md
	$(GO) run ./internal/dev/bench/fleet -out bench-results/fleet.md
	$(GO) run ./internal/dev/bench/fleet -remotes 100 -per-remote 100 -out bench-results/fleet-10k-100.md
	$(GO) run ./internal/dev/bench/fleet -remotes 1000 -per-remote 10 -out bench-results/fleet-10k-1000.md
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test -run '^$$' -bench BenchmarkApply500 -benchtime 5x ./internal/dev/testenv/sink/apply/ | tee bench-results/apply.txt
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test -run '^$$' -bench BenchmarkPushToArtifact -benchtime 5x ./internal/dev/testenv/sink/fluxreceiver/ | tee bench-results/fluxartifact.txt
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test -run '^$$' -bench BenchmarkAgainstSourceController -benchtime 1x -timeout 30m ./internal/dev/testenv/sink/fluxartifact/ | tee bench-results/fluxsource.txt
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test -run '^$$' -bench BenchmarkFailover -benchtime 2x -timeout 60m ./internal/dev/testenv/watcher/cluster/ | tee bench-results/failover.txt
	KUBEBUILDER_ASSETS=$(TESTBIN) $(GO) test -run '^$$' -bench BenchmarkConfigMapStore -benchtime 1x -timeout 30m ./internal/dev/testenv/watcher/cluster/ | tee bench-results/checkpoints.txt
	$(GO) test -run '^$$' -bench BenchmarkMemoryStoreHeld -benchtime 3x ./watcher/ | tee bench-results/memorystore.txt

# make bench-compare BASE=<commit>: P3 (one new commit delivered, with
# P1-P7 on one repository and no polled push) and the wide-tree table, of
# BASE (a worktree of it; its benchmarks under internal/bench before they
# moved to internal/dev/bench) and of this tree, taking turns twice, in one run:
# what a change costs, on the same machine at the same time. The tables
# are in bench-results/compare/.
COMPARE_DIR := bench-results/compare
bench-compare:
	@test -n "$(BASE)" || { echo "usage: make bench-compare BASE=<commit>"; exit 2; }
	mkdir -p $(COMPARE_DIR) && base=$$(mktemp -d)/base && git worktree add -q --detach $$base $(BASE) && \
	trap 'git worktree remove --force '$$base EXIT && out=$$(pwd)/$(COMPARE_DIR) && \
	bb=./internal/dev/bench && { [ -d $$base/internal/dev/bench ] || bb=./internal/bench; } && \
	for i in 1 2; do \
		(cd $$base && $(GO) run $$bb/watchbench -repos 1 -per-repo 1 -pushes 3 -polled 0 -out $$out/base-$$i.md) && \
		$(GO) run ./internal/dev/bench/watchbench -repos 1 -per-repo 1 -pushes 3 -polled 0 -out $$out/head-$$i.md && \
		(cd $$base && $(GO) run $$bb/widetree -out $$out/base-widetree-$$i.md) && \
		$(GO) run ./internal/dev/bench/widetree -out $$out/head-widetree-$$i.md || exit 1; \
	done; grep -h '^| P3 | one new' $$out/base-*.md $$out/head-*.md

fmt:
	gofmt -w $$(git ls-files '*.go')

# go mod tidy in every module. The modules require each other at the last
# release's version, which only go.work resolves to this tree; tidy runs
# outside the workspace on a copy of each go.mod that replaces the others
# with their directories (the same copy release -check tidies with -diff),
# and the module gets the result without those replaces.
tidy:
	$(GO) run ./internal/dev/release/cmd/release -tidy

# The fleet at 100,000 targets on 10,000 remotes, one replica, each of
# three and one that holds every target and owns no remote (half an hour
# to an hour and a half on 2 cores; one replica's start-up took about half
# an hour on a slow day, with a build beside it),
# then the no-change cycle's CPU per remote at 1,000 and 10,000 remotes in
# three alternating rounds (about 12 minutes).
bench-scale:
	$(GO) run ./internal/dev/bench/fleet -remotes 10000 -per-remote 10 -replicas 3 -timeout 60m -out bench-results/fleet-100k.md
	$(GO) run ./internal/dev/bench/fleet -curve 1000,10000 -rounds 3 -per-remote 10 -settle 1s -timeout 60m -out bench-results/fleet-curve.md

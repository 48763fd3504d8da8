# ttsfleet developer entry points. Each target sets up what it needs on a fresh
# machine and says what it is doing. Caches live outside the repository.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

export TTSFLEET_CACHE ?= $(HOME)/.cache/ttsfleet
VENV ?= $(TTSFLEET_CACHE)/venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/pytest
# The environment is refreshed when pyproject.toml changes, or when another checkout
# (a CI clone) uses it: the editable install must point at the code under test.
VENV_STAMP := $(VENV)/.ttsfleet-$(shell { cat pyproject.toml; echo $(CURDIR); } | sha1sum | cut -c1-12)
TOOLS_STAMP := $(TTSFLEET_CACHE)/tools/.stamp-$(shell sha1sum hack/install-tools.sh | cut -c1-12)

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

.PHONY: venv
venv: $(VENV_STAMP) ## Python environment with the operator, runtime and test extras

$(VENV_STAMP): pyproject.toml
	@echo "==> Python environment in $(VENV) (the first run downloads torch: several GB)"
	@test -x $(BIN)/python || python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install --progress-bar off -e '.[operator,runtime,test]'
	@echo "==> qwen-tts 0.1.1, the reference the parity tests compare against (its modules only: --no-deps)"
	$(BIN)/python -m pip install -q --no-deps qwen-tts==0.1.1
	@rm -f $(VENV)/.ttsfleet-* && touch $@

.PHONY: tools
tools: $(TOOLS_STAMP) ## helm, promtool and other binaries the tests drive

$(TOOLS_STAMP):
	@echo "==> test tools in $(TTSFLEET_CACHE)/tools"
	hack/install-tools.sh
	@mkdir -p $(dir $@) && rm -f $(TTSFLEET_CACHE)/tools/.stamp-* && touch $@

.PHONY: control-plane
control-plane: ## build (or reuse) kube-apiserver, controller-manager, scheduler, etcd, kwok
	hack/build-control-plane.sh

# The oldest supported Kubernetes minor (KUBE_OLDEST_VERSION in hack/versions.env; README
# "Supported Kubernetes versions"): its control plane only, the real node runs the newest.
OLDEST := TTSFLEET_KUBE_RELEASE=oldest TTSFLEET_REAL_NODE=0

.PHONY: control-plane-oldest
control-plane-oldest: ## build (or reuse) the control plane of the oldest supported Kubernetes minor
	$(OLDEST) hack/build-control-plane.sh

.PHONY: images
images: ## build (or reuse) the runtime and operator images with no registry (hack/images.sh)
	hack/images.sh build all

.PHONY: cluster-up
cluster-up: control-plane ## start a local cluster: kwok fake GPU nodes + a real node (kind where Docker runs)
	hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## stop the local cluster
	hack/cluster.sh down

.PHONY: unit
unit: venv tools ## fast tests: no cluster, no GPU
	@echo "==> unit tests (tests/)"
	PATH="$(BIN):$(TTSFLEET_CACHE)/tools/bin:$$PATH" $(PYTEST) tests --durations=25

.PHONY: bench-operator
bench-operator: venv control-plane ## the operator at scale on a local kwok cluster (SERVICES=1000 CHANGES=20 OUT=...)
	TTSFLEET_REAL_NODE=0 PYTHONPATH=operator:runtime PATH="$(BIN):$(TTSFLEET_CACHE)/tools/bin:$$PATH" \
		$(BIN)/python bench/operator_scale.py --services $(or $(SERVICES),1000) \
		--changes $(or $(CHANGES),20) --out $(or $(OUT),/tmp/operator-scale.json)

.PHONY: prometheus-adapter
prometheus-adapter: ## build (or reuse) prometheus-adapter from its Go module, for the real HPA e2e
	hack/prometheus-adapter.sh >/dev/null

.PHONY: e2e
e2e: venv tools control-plane images prometheus-adapter ## tests against a real control plane (kwok) and a real node
	@echo "==> e2e tests (e2e/) against a real control plane and a real node"
	PATH="$(BIN):$(TTSFLEET_CACHE)/tools/bin:$$PATH" $(PYTEST) e2e --durations=25
	@echo "==> the real node's teardown leaves the host as it found it (takes the cluster down and up)"
	PATH="$(BIN):$(TTSFLEET_CACHE)/tools/bin:$$PATH" $(PYTEST) e2e -m host_teardown

# What e2e-oldest runs: the operator side (CRD and its CEL rules, rendered children, HPA
# v2, the model cache Job's podFailurePolicy, the chart, leader election) on fake nodes.
# The real node's tests and the canary runs on local runtimes do not depend on the
# control plane's version beyond what these cover, and would add 20 minutes.
E2E_OLDEST_TESTS := e2e/test_cluster.py e2e/test_operator.py e2e/test_operator_drift.py \
  e2e/test_spec_fuzz.py e2e/test_model_cache.py e2e/test_api_keys_secret.py \
  e2e/test_gateway.py e2e/test_spot.py e2e/test_status_follows_children.py \
  e2e/test_scaling.py e2e/test_operator_failover.py

.PHONY: e2e-oldest
e2e-oldest: venv tools control-plane-oldest ## the operator e2e against the oldest supported Kubernetes minor (its own cluster)
	@echo "==> e2e (operator side) against Kubernetes $$(sed -n 's/^KUBE_OLDEST_VERSION=//p' hack/versions.env), fake nodes only"
	$(OLDEST) TTSFLEET_CLUSTER_NAME=$${TTSFLEET_CLUSTER_NAME:-ttsfleet}-oldest \
	  PATH="$(BIN):$(TTSFLEET_CACHE)/tools/bin:$$PATH" $(PYTEST) $(E2E_OLDEST_TESTS) --durations=10

.PHONY: lint
lint: venv ## ruff (format check + lint) and import-linter's layer contracts; hack/lint-fix.sh fixes what it can
	@echo "==> lint: ruff format --check, ruff check, lint-imports (contracts in pyproject.toml)"
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	PYTHONPATH="$(CURDIR)/operator:$(CURDIR)/runtime" $(BIN)/lint-imports

# What e2e needs built beyond the venv and tools: Go binaries and images, then the image
# archives the real node imports. About 50 minutes of mostly CPU on a fresh 2-core machine.
E2E_BUILDS_LOG := $(TTSFLEET_CACHE)/logs/e2e-builds.log

.PHONY: e2e-builds
e2e-builds: control-plane control-plane-oldest images prometheus-adapter ## everything e2e builds (make test runs it beside the unit tests)
	hack/images.sh archive runtime >/dev/null
	hack/images.sh archive operator >/dev/null

# The S3-compatible server of the response cache tests (s3s-fs, a Rust build of ~6.5 min
# cold, nothing warm). make test starts it in the background first; the tests' fixture
# waits for that build under its lock (or builds, when run alone).
S3_SERVER_LOG := $(TTSFLEET_CACHE)/logs/s3-server.log
# `make -n test` runs test's first recipe line for real (it holds $(MAKE)): under -n the
# s3s-fs build is only said, or a dry run (tests/workflow) starts a cold Rust build.
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))

.PHONY: s3-server
s3-server: ## build (or reuse) s3s-fs, the S3 server of the response cache tests
	hack/install-s3-server.sh

# lint and the unit tests use one core most of the time: the e2e builds take the other,
# niced so the tests keep theirs. The builds get a process group of their own (set -m),
# so a failed lint or unit run stops all of them at once; not a session of their own
# (setsid): Linux's autogroup would then schedule them as a peer of the tests and the
# nice level would count for nothing.
.PHONY: test
test: ## everything CI runs: lint, unit, e2e on the newest and the oldest supported Kubernetes; the e2e builds run in the background beside lint and unit
	@echo "==> e2e builds start in the background, niced (log: $(E2E_BUILDS_LOG))"
	@mkdir -p "$(dir $(E2E_BUILDS_LOG))"; \
	  set -m; $(if $(DRY_RUN),echo nice -n 19 hack/install-s3-server.sh,nice -n 19 hack/install-s3-server.sh >"$(S3_SERVER_LOG)" 2>&1) & s3=$$!; \
	  nice -n 19 $(MAKE) --no-print-directory e2e-builds >"$(E2E_BUILDS_LOG)" 2>&1 & builds=$$!; set +m; \
	  trap 'kill -- -$$builds -$$s3 2>/dev/null' EXIT; \
	  $(MAKE) --no-print-directory -j2 venv tools; \
	  $(MAKE) --no-print-directory lint unit; \
	  echo "==> waiting for the e2e builds"; \
	  wait $$builds || { echo "error: the e2e builds failed; the end of $(E2E_BUILDS_LOG):" >&2; \
	    tail -n 40 "$(E2E_BUILDS_LOG)" >&2; exit 1; }; \
	  trap - EXIT; grep -hE '(built|done) in [0-9]+' "$(E2E_BUILDS_LOG)" || true
	$(MAKE) --no-print-directory e2e
	$(MAKE) --no-print-directory e2e-oldest

.PHONY: generate
generate: venv ## rewrite every generated file: CRD (both copies), field docs, dashboards
	$(BIN)/ttsfleet crd > crds/ttsservices.ttsfleet.io.yaml
	cp crds/ttsservices.ttsfleet.io.yaml charts/ttsfleet/crds/ttsservices.ttsfleet.io.yaml
	{ printf '# TTSService fields\n\nGenerated by `ttsfleet crd --fields` from the CRD schema (`crds/ttsservices.ttsfleet.io.yaml`);\na test fails if this page and the schema disagree. Regenerate with `make generate`.\n\n'; \
	  $(BIN)/ttsfleet crd --fields; } > docs/fields.md
	$(BIN)/python hack/generate-dashboards.py

SAMPLE ?= samples/cpu-dev.yaml
.PHONY: dev
dev: ## the main job: local cluster, operator pod from the chart, a fleet that speaks (SAMPLE=...)
	@echo "==> building what the local fleet runs, side by side (a fresh machine: most of an hour)"
	$(MAKE) --no-print-directory -j4 venv tools control-plane images
	$(MAKE) --no-print-directory cluster-up
	PATH="$(BIN):$(TTSFLEET_CACHE)/tools/bin:$$PATH" hack/dev.sh $(SAMPLE)

.PHONY: dev-down
dev-down: ## stop the operator 'make dev' started (the cluster stays: make cluster-down)
	hack/dev.sh down

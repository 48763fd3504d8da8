# ttsfleet developer entry points. Each target sets up what it needs on a fresh
# machine and says what it is doing. Caches live outside the repository.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

export TTSFLEET_CACHE ?= $(HOME)/.cache/ttsfleet
VENV ?= $(TTSFLEET_CACHE)/venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/pytest
# The environment is rebuilt when pyproject.toml changes.
VENV_STAMP := $(VENV)/.ttsfleet-$(shell sha1sum pyproject.toml | cut -c1-12)
TOOLS_STAMP := $(TTSFLEET_CACHE)/tools/.stamp-$(shell sha1sum hack/install-tools.sh | cut -c1-12)

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

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

.PHONY: cluster-up
cluster-up: control-plane ## start a local cluster (kwok; kind where Docker runs) with fake GPU nodes
	hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## stop the local cluster
	hack/cluster.sh down

.PHONY: unit
unit: venv tools ## fast tests: no cluster, no GPU
	@echo "==> unit tests (tests/)"
	PATH="$(TTSFLEET_CACHE)/tools/bin:$$PATH" $(PYTEST) tests

.PHONY: e2e
e2e: venv tools control-plane ## tests against a real control plane (kwok here)
	@echo "==> e2e tests (e2e/) against a real control plane"
	PATH="$(TTSFLEET_CACHE)/tools/bin:$$PATH" $(PYTEST) e2e

.PHONY: test
test: unit e2e ## everything CI runs

.PHONY: dev
dev: venv tools cluster-up ## the main job: local cluster, operator from the chart, a sample TTSService
	PATH="$(TTSFLEET_CACHE)/tools/bin:$(BIN):$$PATH" hack/dev.sh

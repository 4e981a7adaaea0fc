# variant-autoscaler — `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PYTEST_ARGS ?=

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: pyproject.toml hack/pyproject.toml requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --constraint requirements.lock -e '.[dev]' -e hack
	@touch $@

.PHONY: install
install: $(VENV)/.installed ## Create ./.venv: the project, its dev tools (requirements.lock) and hack/'s local cluster, demo and test support.

.PHONY: lock
lock: ## Re-resolve requirements.lock (and the images' pins) from pyproject.toml; then `make install`.
	hack/images/lock.sh

.PHONY: test
test: install cluster-bins images-deps ## Run every test tier (unit, integration, e2e).
	$(BIN)/pytest tests --with-e2e $(PYTEST_ARGS)

.PHONY: e2e
e2e: install cluster-bins ## Run the end-to-end suite only (full local cluster; figures in _out/e2e, docs/e2e.md).
	$(BIN)/pytest tests/e2e --with-e2e $(PYTEST_ARGS)

.PHONY: unit
unit: install ## Run the unit tests only (no processes, no network).
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

.PHONY: lint
lint: install shellcheck ## ruff, mypy --strict, the import-layering contracts and shellcheck.
	$(BIN)/ruff check operator emulator hack tests bench
	$(BIN)/ruff format --check operator emulator hack tests bench
	$(BIN)/mypy operator/variant_autoscaler emulator/vllm_emulator
	$(BIN)/lint-imports

.PHONY: fmt
fmt: install ## Format the code with ruff.
	$(BIN)/ruff format operator emulator hack tests bench
	$(BIN)/ruff check --fix operator emulator hack tests bench

.PHONY: bench
bench: install ## Run the benchmarks and rewrite docs/benchmarks.md.
	$(PY) bench/run_all.py --output docs/benchmarks.md

RUN_ARGS ?= --all-namespaces --log-format plain
.PHONY: run
run: install ## Run the operator against the current kubeconfig (RUN_ARGS, default: cluster-wide, plain logs).
	$(BIN)/variant-autoscaler run $(RUN_ARGS)

DEMO_PLOT ?= docs/img/demo.png
DEMO_ARGS ?=
.PHONY: demo
demo: install cluster-bins ## Local cluster, operator, two emulated variants under a load schedule, live; plot to DEMO_PLOT.
	$(PY) -m demo --plot $(DEMO_PLOT) $(DEMO_ARGS)

.PHONY: clean
clean: ## Remove the virtualenv and caches.
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# ---- local cluster (hack/, docs/local-cluster.md) -------------------------------------------------------
CLUSTER_PROFILE ?= full
LOCALCLUSTER := $(PY) -m localcluster

.PHONY: cluster-bins
cluster-bins: ## Install Prometheus (apt); build Kubernetes, kwok, prometheus-adapter, etcd (cached, outside the repo).
	hack/install-deps.sh
	hack/build-bins.sh

.PHONY: cluster-up
cluster-up: install cluster-bins ## Start a local cluster in the background (CLUSTER_PROFILE=full|api).
	$(LOCALCLUSTER) up --profile $(CLUSTER_PROFILE)

.PHONY: cluster-down
cluster-down: install ## Stop every process of the local cluster (by pid) and delete its state.
	$(LOCALCLUSTER) down

.PHONY: cluster-status
cluster-status: install ## Show the local cluster's endpoints and which of its processes run.
	$(LOCALCLUSTER) status

# ---- container images and kind (hack/images/, hack/kind/, docs/images.md, docs/kind.md) ------------------
IMG ?= variant-autoscaler:dev
EMULATOR_IMG ?= vllm-emulator:dev
BASE_IMAGE ?=
KIND_CLUSTER ?= variant-autoscaler
IMAGE_ENV := OPERATOR_IMAGE=$(IMG) EMULATOR_IMAGE=$(EMULATOR_IMG)

.PHONY: docker-build
docker-build: ## Build the operator image IMG (default variant-autoscaler:dev; BASE_IMAGE=... for another base).
	$(IMAGE_ENV) hack/images/build.sh $(if $(BASE_IMAGE),--base $(BASE_IMAGE)) operator

.PHONY: emulator-build
emulator-build: ## Build the emulator image EMULATOR_IMG (default vllm-emulator:dev).
	$(IMAGE_ENV) hack/images/build.sh $(if $(BASE_IMAGE),--base $(BASE_IMAGE)) emulator

.PHONY: images-deps
images-deps: ## Install docker.io, debootstrap and shellcheck from Debian where missing.
	hack/images/install-deps.sh

.PHONY: images-test
images-test: install images-deps ## Build both images with no registry (debootstrap base, local wheels) and smoke-test them.
	hack/images/test.sh

.PHONY: shellcheck
shellcheck: ## shellcheck every hack/**/*.sh (installs shellcheck from Debian if missing).
	hack/images/install-deps.sh shellcheck
	shellcheck -x $$(find hack -name '*.sh' | sort)

.PHONY: kind-up
kind-up: ## kind cluster: GPU-labelled nodes, both images built and loaded, Prometheus, prometheus-adapter.
	$(IMAGE_ENV) KIND_CLUSTER=$(KIND_CLUSTER) hack/kind/kind-up.sh

.PHONY: deploy
deploy: ## Apply deploy/default with the image IMG to the current kubectl context (kind: wired to its Prometheus).
	$(IMAGE_ENV) KIND_CLUSTER=$(KIND_CLUSTER) hack/kind/deploy.sh apply

.PHONY: undeploy
undeploy: ## Delete what `make deploy` applied (the CRD too, and with it every VariantAutoscaling).
	$(IMAGE_ENV) KIND_CLUSTER=$(KIND_CLUSTER) hack/kind/deploy.sh delete

.PHONY: kind-demo
kind-demo: ## On the kind cluster: an emulator variant, its VariantAutoscaling and HPA, driven by a load schedule.
	$(IMAGE_ENV) KIND_CLUSTER=$(KIND_CLUSTER) hack/kind/kind-demo.sh

.PHONY: kind-down
kind-down: ## Delete the kind cluster.
	KIND_CLUSTER=$(KIND_CLUSTER) hack/kind/kind-down.sh

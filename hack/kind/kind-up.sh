#!/usr/bin/env bash
# Bring up the kind cluster for variant-autoscaler (make kind-up; docs/kind.md):
#   1. a kind cluster (hack/kind/cluster.yaml) whose workers are labelled as NVIDIA A100, AMD MI300X and
#      Intel Gaudi 2 nodes, with their <vendor>/gpu capacity advertised on the Node status;
#   2. the operator and emulator images, built (hack/images/build.sh) and loaded into the nodes;
#   3. Prometheus (kube-prometheus-stack) and prometheus-adapter with WVA's external-metric rule
#      (deploy/prometheus/prometheus-adapter-values.yaml), in the `monitoring` namespace.
# Every step is idempotent: run it again to repair or refresh (images are rebuilt and reloaded).
#
# Needs Docker, kind >= v0.33.0, kubectl, Helm and network access (base image, PyPI, charts, images).
# Environment: see hack/kind/common.sh; VA_KIND_SKIP_BUILD=1 loads existing images without building.
set -euo pipefail
# shellcheck source=hack/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

need_tools docker kind kubectl helm
docker info >/dev/null 2>&1 || die "Docker is installed but no engine answers; start Docker first"

# ---- 1. cluster ------------------------------------------------------------------------------------------
if kind_cluster_exists; then
  log "kind cluster '${KIND_CLUSTER}' exists"
else
  log "creating kind cluster '${KIND_CLUSTER}' (${KIND_NODE_IMAGE})"
  kind create cluster --name "${KIND_CLUSTER}" --image "${KIND_NODE_IMAGE}" \
    --config "${KIND_DIR}/cluster.yaml" --wait 180s
fi
kk wait --for=condition=Ready nodes --all --timeout=180s >/dev/null

# Advertise each GPU node's <vendor>/gpu capacity (the count in its gpu.count label) on its status, as a
# device plugin would. A JSON-patch "add" replaces an existing value, so this is safe to repeat.
for vendor in nvidia.com amd.com intel.com; do
  jsonpath="{range .items[*]}{.metadata.name}{\" \"}{.metadata.labels.${vendor//./\\.}/gpu\\.count}{\"\\n\"}{end}"
  while read -r node count; do
    [[ -n "${node}" && -n "${count}" ]] || continue
    patch="[{\"op\":\"add\",\"path\":\"/status/capacity/${vendor}~1gpu\",\"value\":\"${count}\"},"
    patch+="{\"op\":\"add\",\"path\":\"/status/allocatable/${vendor}~1gpu\",\"value\":\"${count}\"}]"
    kk patch node "${node}" --subresource=status --type=json -p "${patch}" >/dev/null
    log "node ${node}: ${count} x ${vendor}/gpu"
  done < <(kk get nodes -l "${vendor}/gpu.count" -o "jsonpath=${jsonpath}")
done

# ---- 2. images -------------------------------------------------------------------------------------------
if [[ "${VA_KIND_SKIP_BUILD:-0}" != "1" ]]; then
  OPERATOR_IMAGE="${OPERATOR_IMAGE}" EMULATOR_IMAGE="${EMULATOR_IMAGE}" "${REPO_ROOT}/hack/images/build.sh"
fi
for image in "${OPERATOR_IMAGE}" "${EMULATOR_IMAGE}"; do
  docker image inspect "${image}" >/dev/null 2>&1 \
    || die "image ${image} not found (unset VA_KIND_SKIP_BUILD, or run make docker-build emulator-build)"
  log "loading ${image} into the nodes"
  kind load docker-image "${image}" --name "${KIND_CLUSTER}"
done

# ---- 3. Prometheus and prometheus-adapter ----------------------------------------------------------------
helm repo add prometheus-community https://prometheus-community.github.io/helm-charts --force-update >/dev/null
helm repo update prometheus-community >/dev/null
log "installing kube-prometheus-stack ${KUBE_PROMETHEUS_STACK_VERSION} in ${MONITORING_NS}"
helm upgrade --install kube-prometheus-stack prometheus-community/kube-prometheus-stack \
  --kube-context "${KIND_CONTEXT}" --namespace "${MONITORING_NS}" --create-namespace \
  --version "${KUBE_PROMETHEUS_STACK_VERSION}" \
  --values "${KIND_DIR}/kube-prometheus-stack-values.yaml" --wait --timeout 10m
# The Prometheus pod is made by the Prometheus Operator after the release is "ready"; wait for it.
for _ in $(seq 1 60); do
  if kk -n "${MONITORING_NS}" get pods -l app.kubernetes.io/name=prometheus -o name 2>/dev/null | grep -q .; then break; fi
  sleep 5
done
kk -n "${MONITORING_NS}" wait --for=condition=Ready pods -l app.kubernetes.io/name=prometheus --timeout=300s >/dev/null

log "installing prometheus-adapter ${PROMETHEUS_ADAPTER_VERSION} with WVA's inferno_desired_replicas rule"
helm upgrade --install prometheus-adapter prometheus-community/prometheus-adapter \
  --kube-context "${KIND_CONTEXT}" --namespace "${MONITORING_NS}" \
  --version "${PROMETHEUS_ADAPTER_VERSION}" \
  --values "${REPO_ROOT}/deploy/prometheus/prometheus-adapter-values.yaml" \
  --set "prometheus.url=${KIND_PROMETHEUS_URL%:*}" --set prometheus.port=9090 --wait --timeout 5m
kk wait --for=condition=Available apiservice/v1beta1.external.metrics.k8s.io --timeout=300s >/dev/null

log "ready: context ${KIND_CONTEXT}; next: make deploy, then make kind-demo"

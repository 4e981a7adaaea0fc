# Shared settings and helpers for hack/kind/*.sh. Source it; it does nothing on its own.
# shellcheck shell=bash disable=SC2034  # the variables are for the scripts that source this file
#
# Environment (all optional):
#   KIND_CLUSTER          cluster name (default variant-autoscaler; kubectl context kind-<name>)
#   KIND_NODE_IMAGE       node image (default: Kubernetes v1.36.4, the image kind v0.33.0 was released with)
#   OPERATOR_IMAGE        operator image (default variant-autoscaler:dev, what `make docker-build` builds)
#   EMULATOR_IMAGE        emulator image (default vllm-emulator:dev, what `make emulator-build` builds)
#   KUBE_PROMETHEUS_STACK_VERSION, PROMETHEUS_ADAPTER_VERSION   Helm chart versions (pinned below)
#   VA_KIND_OUT_DIR       where generated kustomizations go (default _out/kind in the repository)

KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${KIND_DIR}/../.." && pwd)"
KIND_CLUSTER="${KIND_CLUSTER:-variant-autoscaler}"
KIND_CONTEXT="kind-${KIND_CLUSTER}"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed}"
OPERATOR_IMAGE="${OPERATOR_IMAGE:-variant-autoscaler:dev}"
EMULATOR_IMAGE="${EMULATOR_IMAGE:-vllm-emulator:dev}"
KUBE_PROMETHEUS_STACK_VERSION="${KUBE_PROMETHEUS_STACK_VERSION:-88.6.0}"
PROMETHEUS_ADAPTER_VERSION="${PROMETHEUS_ADAPTER_VERSION:-5.3.0}"
MONITORING_NS=monitoring
# The Prometheus Operator's governing Service for every Prometheus it runs: a stable name whatever the release.
KIND_PROMETHEUS_URL="http://prometheus-operated.${MONITORING_NS}.svc:9090"
OPERATOR_NS=workload-variant-autoscaler-system
OPERATOR_DEPLOYMENT=variant-autoscaler-controller-manager
DEMO_NS=llm-d-sim
# Generated kustomizations (image names, kind settings) go here; _out/ is git-ignored.
OUT_DIR="${VA_KIND_OUT_DIR:-${REPO_ROOT}/_out/kind}"

log() { printf '[%s %s] %s\n' "$(basename "$0" .sh)" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# need TOOL HINT: fail with HINT when TOOL is not on PATH.
need() { command -v "$1" >/dev/null || die "'$1' is not installed: $2"; }

need_tools() {
  local tool
  for tool in "$@"; do
    case "${tool}" in
      docker) need docker "install Docker (https://docs.docker.com/engine/install/)" ;;
      kind) need kind "install kind >= v0.33.0 (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)" ;;
      kubectl) need kubectl "install kubectl (https://kubernetes.io/docs/tasks/tools/)" ;;
      helm) need helm "install Helm 3 or 4 (https://helm.sh/docs/intro/install/)" ;;
      *) need "${tool}" "install it" ;;
    esac
  done
}

kind_cluster_exists() { kind get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER}"; }

# kubectl against the kind cluster, whatever the current context is.
kk() { kubectl --context "${KIND_CONTEXT}" "$@"; }

require_kind_cluster() {
  kind_cluster_exists || die "no kind cluster '${KIND_CLUSTER}': run 'make kind-up' first"
}

# split_image REF: print "name tag digest" (tag or digest may be "-") for a kustomize `images:` entry.
split_image() {
  local ref="$1" name tag="-" digest="-"
  if [[ "${ref}" == *@* ]]; then
    digest="${ref#*@}"
    ref="${ref%%@*}"
  fi
  name="${ref}"
  # A ':' after the last '/' separates the tag (a ':' before it belongs to a registry port).
  if [[ "${ref##*/}" == *:* ]]; then
    tag="${ref##*:}"
    name="${ref%:*}"
  fi
  printf '%s %s %s\n' "${name}" "${tag}" "${digest}"
}

# kustomize_image ORIGINAL REF: the `images:` entry that replaces ORIGINAL by REF.
kustomize_image() {
  local name tag digest
  read -r name tag digest < <(split_image "$2")
  printf '  - name: %s\n    newName: %s\n' "$1" "${name}"
  if [[ "${tag}" != "-" ]]; then printf '    newTag: "%s"\n' "${tag}"; fi
  if [[ "${digest}" != "-" ]]; then printf '    digest: "%s"\n' "${digest}"; fi
}

# repo_path DIR PATH: PATH (relative to the repository root) as seen from DIR, for a kustomization there.
# (python3 rather than GNU realpath --relative-to, which macOS lacks.)
repo_path() {
  python3 -c 'import os, sys; r = os.path.realpath; print(os.path.relpath(r(sys.argv[2]), r(sys.argv[1])))' \
    "$1" "${REPO_ROOT}/$2"
}

#!/usr/bin/env bash
# Delete the kind cluster of `make kind-up` (make kind-down), and the kustomizations generated for it.
# Does nothing if the cluster does not exist. Images stay in the local Docker engine.
set -euo pipefail
# shellcheck source=hack/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

need_tools kind
if kind_cluster_exists; then
  log "deleting kind cluster '${KIND_CLUSTER}'"
  kind delete cluster --name "${KIND_CLUSTER}"
else
  log "no kind cluster '${KIND_CLUSTER}'"
fi
rm -rf "${OUT_DIR}"

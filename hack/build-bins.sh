#!/usr/bin/env bash
# Build the Go components of the local test cluster from their published modules, at the versions pinned
# in hack/versions.env, into a cache outside the repository:
#
#   $VA_CACHE_DIR/bin/kubernetes-<v>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
#   $VA_CACHE_DIR/bin/etcd-<v>/etcd          (only when Debian's etcd is missing/too old, or VA_ETCD_SOURCE=go)
#   $VA_CACHE_DIR/bin/kwok-<v>/kwok
#   $VA_CACHE_DIR/bin/prometheus-adapter-<v>/prometheus-adapter
#
# VA_CACHE_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/variant-autoscaler. A component whose directory
# holds a complete build (a `.complete` stamp) is not rebuilt, so a second run builds nothing.
#
# Usage: hack/build-bins.sh [component...]   (components: kubernetes etcd kwok prometheus-adapter; default:
#        all but etcd, plus etcd when no Debian etcd >= ETCD_MIN_VERSION is installed or VA_ETCD_SOURCE=go)
# Environment: VA_BUILD_NICE (default 10) — niceness of the Go compiler; GO (default: go on PATH, then
# /usr/local/go/bin/go).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/versions.env
source "${HACK_DIR}/versions.env"
# shellcheck source=hack/lib.sh
source "${HACK_DIR}/lib.sh"

BUILD_ROOT="${CACHE_DIR}/build"
NICE="${VA_BUILD_NICE:-10}"

GO="${GO:-$(command -v go || true)}"
if [[ -z "${GO}" && -x /usr/local/go/bin/go ]]; then
  GO=/usr/local/go/bin/go
fi
if [[ -z "${GO}" ]]; then
  echo "build-bins: no Go toolchain found (install Go >= 1.26 or set GO=/path/to/go)" >&2
  exit 1
fi

export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

log() { printf '[build-bins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# prepare_module DIR MODULE_NAME: a fresh throwaway module directory with a go.mod named MODULE_NAME.
prepare_module() {
  local dir="$1" name="$2"
  rm -rf "${dir}"
  mkdir -p "${dir}"
  printf 'module %s\n\ngo 1.26.0\n' "${name}" >"${dir}/go.mod"
}

# finish DEST STAGING: move a finished build into place atomically and stamp it complete.
finish() {
  local dest="$1" staging="$2"
  date -u +%Y-%m-%dT%H:%M:%SZ >"${staging}/.complete"
  rm -rf "${dest}"
  mv "${staging}" "${dest}"
}

is_built() { [[ -f "$1/.complete" ]]; }

build_kubernetes() {
  local v="${KUBERNETES_VERSION}" dest="${BIN_ROOT}/kubernetes-${KUBERNETES_VERSION}"
  if is_built "${dest}"; then log "kubernetes ${v}: cached in ${dest}"; return; fi
  local minor patch staging_version
  minor="$(cut -d. -f2 <<<"${v#v}")"
  patch="$(cut -d. -f3 <<<"${v#v}")"
  staging_version="v0.${minor}.${patch}"
  local mod="${BUILD_ROOT}/kubernetes-${v}"
  prepare_module "${mod}" "variant-autoscaler.local/build/kubernetes"
  # k8s.io/kubernetes points its staging modules at ./staging/src/...; a dependent module must replace
  # them with their published releases. Derive the list from the release's own go.mod so it stays exact.
  log "kubernetes ${v}: resolving staging modules (${staging_version})"
  (cd "${mod}" && "${GO}" mod download -json "k8s.io/kubernetes@${v}" >"${mod}/download.json")
  local upstream_mod
  upstream_mod="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' "${mod}/download.json")"
  {
    printf '\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "${v}"
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#\t\1 => \1 '"${staging_version}"'#p' \
      "${upstream_mod}"
    printf ')\n'
  } >>"${mod}/go.mod"
  local pkg=k8s.io/component-base/version cpkg=k8s.io/client-go/pkg/version ldflags="-s -w"
  local p
  for p in "${pkg}" "${cpkg}"; do
    ldflags+=" -X ${p}.gitVersion=${v} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${minor}"
    ldflags+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=1970-01-01T00:00:00Z"
  done
  local staging="${dest}.partial"
  rm -rf "${staging}" && mkdir -p "${staging}"
  log "kubernetes ${v}: compiling kube-apiserver, kube-controller-manager, kube-scheduler, kubectl"
  (cd "${mod}" && nice -n "${NICE}" "${GO}" build -trimpath -ldflags "${ldflags}" -o "${staging}/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl)
  finish "${dest}" "${staging}"
  log "kubernetes ${v}: done"
}

build_etcd() {
  local v="${ETCD_VERSION}" dest="${BIN_ROOT}/etcd-${ETCD_VERSION}"
  if is_built "${dest}"; then log "etcd ${v}: cached in ${dest}"; return; fi
  local mod="${BUILD_ROOT}/etcd-${v}"
  prepare_module "${mod}" "variant-autoscaler.local/build/etcd"
  printf '\nrequire go.etcd.io/etcd/server/v3 %s\n' "${v}" >>"${mod}/go.mod"
  local staging="${dest}.partial"
  rm -rf "${staging}" && mkdir -p "${staging}"
  log "etcd ${v}: compiling"
  (cd "${mod}" && nice -n "${NICE}" "${GO}" build -trimpath -ldflags "-s -w" -o "${staging}/etcd" \
    go.etcd.io/etcd/server/v3)
  finish "${dest}" "${staging}"
  log "etcd ${v}: done"
}

build_kwok() {
  local v="${KWOK_VERSION}" dest="${BIN_ROOT}/kwok-${KWOK_VERSION}"
  if is_built "${dest}"; then log "kwok ${v}: cached in ${dest}"; return; fi
  local mod="${BUILD_ROOT}/kwok-${v}"
  prepare_module "${mod}" "variant-autoscaler.local/build/kwok"
  printf '\nrequire sigs.k8s.io/kwok %s\n' "${v}" >>"${mod}/go.mod"
  local staging="${dest}.partial"
  rm -rf "${staging}" && mkdir -p "${staging}"
  log "kwok ${v}: compiling"
  (cd "${mod}" && nice -n "${NICE}" "${GO}" build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${v}" -o "${staging}/kwok" \
    sigs.k8s.io/kwok/cmd/kwok)
  finish "${dest}" "${staging}"
  log "kwok ${v}: done"
}

build_prometheus_adapter() {
  local v="${PROMETHEUS_ADAPTER_VERSION}" dest="${BIN_ROOT}/prometheus-adapter-${PROMETHEUS_ADAPTER_VERSION}"
  if is_built "${dest}"; then log "prometheus-adapter ${v}: cached in ${dest}"; return; fi
  local mod="${BUILD_ROOT}/prometheus-adapter-${v}"
  prepare_module "${mod}" "variant-autoscaler.local/build/prometheus-adapter"
  printf '\nrequire sigs.k8s.io/prometheus-adapter %s\n' "${v}" >>"${mod}/go.mod"
  local staging="${dest}.partial"
  rm -rf "${staging}" && mkdir -p "${staging}"
  log "prometheus-adapter ${v}: compiling"
  (cd "${mod}" && nice -n "${NICE}" "${GO}" build -trimpath -ldflags "-s -w" \
    -o "${staging}/prometheus-adapter" sigs.k8s.io/prometheus-adapter/cmd/adapter)
  finish "${dest}" "${staging}"
  log "prometheus-adapter ${v}: done"
}

main() {
  local components=("$@")
  if [[ ${#components[@]} -eq 0 ]]; then
    components=(kubernetes kwok prometheus-adapter)
    if [[ "${VA_ETCD_SOURCE:-debian}" == "go" ]] || ! debian_etcd_ok; then
      components+=(etcd)
    fi
  fi
  mkdir -p "${BIN_ROOT}" "${BUILD_ROOT}"
  # One build at a time per cache (concurrent `make` runs would race on the same staging directories).
  if command -v flock >/dev/null; then
    exec 9>"${CACHE_DIR}/build.lock"
    flock 9
  fi
  local start=${SECONDS} c
  for c in "${components[@]}"; do
    case "${c}" in
      kubernetes) build_kubernetes ;;
      etcd) build_etcd ;;
      kwok) build_kwok ;;
      prometheus-adapter) build_prometheus_adapter ;;
      *) echo "build-bins: unknown component '${c}'" >&2; exit 2 ;;
    esac
  done
  log "all requested components ready in ${BIN_ROOT} ($((SECONDS - start))s)"
}

main "$@"

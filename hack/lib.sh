# shellcheck shell=bash
# Shared helpers for hack/*.sh (sourced after hack/versions.env). Keep in step with localcluster/versions.py.

# The binary cache shared with localcluster/versions.py (VA_CACHE_DIR overrides it).
CACHE_DIR="${VA_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/variant-autoscaler}"
BIN_ROOT="${CACHE_DIR}/bin"

# version_ge A B: true when version A >= version B (dotted numbers).
version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]; }

# prometheus_ok: a Prometheus >= PROMETHEUS_MIN_VERSION is at VA_PROMETHEUS_BIN or on PATH.
prometheus_ok() {
  local bin="${VA_PROMETHEUS_BIN:-$(command -v prometheus || true)}"
  [[ -n "${bin}" && -x "${bin}" ]] || return 1
  local v
  v="$("${bin}" --version 2>&1 | sed -n 's/^prometheus, version \([0-9.]*\).*/\1/p' | head -n1)"
  [[ -n "${v}" ]] && version_ge "${v}" "${PROMETHEUS_MIN_VERSION}"
}

# debian_etcd_ok: an etcd >= ETCD_MIN_VERSION is at VA_ETCD_BIN or on PATH (Debian's etcd-server).
debian_etcd_ok() {
  local bin="${VA_ETCD_BIN:-$(command -v etcd || true)}"
  [[ -n "${bin}" && -x "${bin}" ]] || return 1
  local v
  v="$("${bin}" --version 2>&1 | sed -n 's/^etcd Version: \([0-9.]*\).*/\1/p' | head -n1)"
  [[ -n "${v}" ]] && version_ge "${v}" "${ETCD_MIN_VERSION}"
}

# built_etcd_ok: hack/build-bins.sh already built etcd ETCD_VERSION into the cache.
built_etcd_ok() { [[ -f "${BIN_ROOT}/etcd-${ETCD_VERSION}/.complete" ]]; }

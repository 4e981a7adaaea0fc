#!/usr/bin/env bash
# Install the system packages the local test cluster needs (Debian/Ubuntu): Prometheus (`prometheus`) and,
# when Debian's is recent enough for the pinned kube-apiserver (ETCD_MIN_VERSION in versions.env), etcd
# (`etcd-server`); otherwise hack/build-bins.sh builds etcd from its Go module. Idempotent: nothing is
# installed when everything is present.
#
# Runs as root (CI) or through sudo. The packages' own services are never started: the local cluster runs
# its own etcd and Prometheus on free loopback ports.
#
# Environment:
#   VA_SKIP_APT=1        never call apt-get (provide the tools yourself; see VA_PROMETHEUS_BIN / VA_ETCD_BIN)
#   VA_ETCD_SOURCE=go    never install Debian's etcd; hack/build-bins.sh builds it from its Go module
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/versions.env
source "${HACK_DIR}/versions.env"
# shellcheck source=hack/lib.sh
source "${HACK_DIR}/lib.sh"

log() { printf '[install-deps] %s\n' "$*" >&2; }

need_prometheus=0
need_etcd=0
prometheus_ok || need_prometheus=1
if [[ "${VA_ETCD_SOURCE:-debian}" != "go" ]] && ! debian_etcd_ok && ! built_etcd_ok; then
  need_etcd=1
fi

if [[ ${need_prometheus} == 0 && ${need_etcd} == 0 ]]; then
  log "system packages present"
  exit 0
fi
if [[ "${VA_SKIP_APT:-0}" == "1" || -z "$(command -v apt-get || true)" ]]; then
  if [[ ${need_prometheus} == 1 ]]; then
    log "Prometheus >= ${PROMETHEUS_MIN_VERSION} is missing: install it (or set VA_PROMETHEUS_BIN)"
    exit 1
  fi
  log "no suitable etcd installed; hack/build-bins.sh builds etcd ${ETCD_VERSION}"
  exit 0
fi

SUDO=()
if [[ "$(id -u)" != "0" ]]; then
  if command -v sudo >/dev/null; then SUDO=(sudo); else
    log "cannot install packages: run as root or install sudo"
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq

packages=()
[[ ${need_prometheus} == 1 ]] && packages+=(prometheus)
if [[ ${need_etcd} == 1 ]]; then
  candidate="$(apt-cache policy etcd-server 2>/dev/null | sed -n 's/^ *Candidate: \([0-9][0-9.]*\).*/\1/p')"
  if [[ -n "${candidate}" ]] && version_ge "${candidate}" "${ETCD_MIN_VERSION}"; then
    packages+=(etcd-server)
  else
    log "Debian's etcd-server (${candidate:-not packaged}) is older than ${ETCD_MIN_VERSION};" \
      "hack/build-bins.sh builds etcd ${ETCD_VERSION} from its Go module instead"
  fi
fi
if [[ ${#packages[@]} -eq 0 ]]; then
  exit 0
fi

# Keep the packages' init scripts from starting system-wide services.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [[ ! -e "${policy}" ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "${policy}" >/dev/null
  "${SUDO[@]}" chmod 0755 "${policy}"
  added_policy=1
fi
cleanup() { if [[ ${added_policy} == 1 ]]; then "${SUDO[@]}" rm -f "${policy}"; fi; }
trap cleanup EXIT

log "installing: ${packages[*]}"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
prometheus_ok || { log "Prometheus >= ${PROMETHEUS_MIN_VERSION} still not available"; exit 1; }
log "done"

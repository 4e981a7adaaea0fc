#!/usr/bin/env bash
# Install the Debian packages the image and script checks need, if missing: the Docker engine and CLI
# (docker.io), debootstrap (the local base image) and shellcheck (make lint). Idempotent: nothing is
# installed when everything asked for is present. The packages' own services are never started: the image
# check starts a private engine for itself (hack/images/test.sh).
#
# Usage: hack/images/install-deps.sh [docker] [debootstrap] [shellcheck]   (default: all three)
# Runs as root (CI) or through sudo; VA_SKIP_APT=1 only reports what is missing.
set -euo pipefail

log() { printf '[images/install-deps] %s\n' "$*" >&2; }

wanted=("$@")
[[ ${#wanted[@]} -gt 0 ]] || wanted=(docker debootstrap shellcheck)

missing=()
for tool in "${wanted[@]}"; do
  case "${tool}" in
    # The CLI may come from elsewhere (e.g. Docker's own packages); the engine is what we need.
    docker) command -v dockerd >/dev/null || missing+=(docker.io) ;;
    debootstrap) command -v debootstrap >/dev/null || missing+=(debootstrap) ;;
    shellcheck) command -v shellcheck >/dev/null || missing+=(shellcheck) ;;
    *) log "unknown tool '${tool}' (docker, debootstrap, shellcheck)"; exit 2 ;;
  esac
done

if [[ ${#missing[@]} -eq 0 ]]; then
  log "present: ${wanted[*]}"
  exit 0
fi
if [[ "${VA_SKIP_APT:-0}" == "1" ]]; then
  log "missing: ${missing[*]} (VA_SKIP_APT=1, not installing)"
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  log "missing: ${missing[*]}; this script only knows apt-get: install them with your package manager"
  exit 1
fi
SUDO=()
if [[ "$(id -u)" != "0" ]]; then
  if command -v sudo >/dev/null; then SUDO=(sudo); else
    log "missing: ${missing[*]}; run as root or install sudo"
    exit 1
  fi
fi

# Keep the packages' init scripts from starting a system-wide dockerd.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [[ ! -e "${policy}" ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "${policy}" >/dev/null
  "${SUDO[@]}" chmod 0755 "${policy}"
  added_policy=1
fi
cleanup() { if [[ ${added_policy} == 1 ]]; then "${SUDO[@]}" rm -f "${policy}"; fi; }
trap cleanup EXIT

log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "done"

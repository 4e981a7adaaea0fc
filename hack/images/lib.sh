# Shared helpers for hack/images/*.sh. Source it; it does nothing on its own.
#
# Environment:
#   VA_CACHE_DIR     cache root, default ${XDG_CACHE_HOME:-$HOME/.cache}/variant-autoscaler (outside the repo)
#   DOCKER           docker CLI, default `docker` on PATH
#   VA_DOCKER_STORAGE_DRIVER  storage driver for a private engine (default: dockerd's choice, then vfs)
# shellcheck shell=bash

IMAGES_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${IMAGES_DIR}/../.." && pwd)"
CACHE_DIR="${VA_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/variant-autoscaler}"
# shellcheck disable=SC2034  # used by the scripts that source this file
IMAGES_CACHE="${CACHE_DIR}/images"
DOCKER="${DOCKER:-docker}"
# Without the buildx plugin a current docker CLI refuses to build unless told to use the classic builder
# (Debian's docker.io ships none). The Dockerfiles need nothing BuildKit-specific.
if [[ -z "${DOCKER_BUILDKIT:-}" ]] && ! "${DOCKER}" buildx version >/dev/null 2>&1; then
  export DOCKER_BUILDKIT=0
fi

# Default image names; override with OPERATOR_IMAGE / EMULATOR_IMAGE.
OPERATOR_IMAGE="${OPERATOR_IMAGE:-variant-autoscaler:dev}"
EMULATOR_IMAGE="${EMULATOR_IMAGE:-vllm-emulator:dev}"

log() { printf '[%s %s] %s\n' "$(basename "$0" .sh)" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# banner LINE...: a box on stderr that nobody can miss in a CI log.
banner() {
  local line bar
  bar="$(printf '#%.0s' $(seq 1 100))"
  printf '\n%s\n' "${bar}" >&2
  for line in "$@"; do printf '##  %s\n' "${line}" >&2; done
  printf '%s\n\n' "${bar}" >&2
}

# Exit status of every script here when no container engine can be used (distinct from a build failure).
readonly ENGINE_UNAVAILABLE=3

# engine_unavailable REASON [DETAIL...]: say loudly that nothing was built, then exit ENGINE_UNAVAILABLE.
engine_unavailable() {
  banner "CONTAINER ENGINE UNAVAILABLE: the images were NOT built and NOT run." \
    "reason: $1" "${@:2}" \
    "Nothing about the images was verified. Fix the engine (docs/images.md, 'Troubleshooting')."
  exit "${ENGINE_UNAVAILABLE}"
}

git_revision() { git -C "${REPO_ROOT}" rev-parse --short=12 HEAD 2>/dev/null || echo unknown; }

project_version() {
  sed -n 's/^version = "\(.*\)"$/\1/p' "${REPO_ROOT}/pyproject.toml" | head -n1
}

# ---------------------------------------------------------------------------------------------------------
# A private Docker engine, for machines (CI) where none runs: dockerd with its own socket, data root in the
# cache (so imported bases and build layers survive between runs), no iptables and no bridge (containers get
# --network none or host only). Started by engine_up, stopped by engine_down if and only if we started it.

PRIVATE_ENGINE_DIR="${CACHE_DIR}/docker"
PRIVATE_ENGINE_SOCK="${PRIVATE_ENGINE_DIR}/docker.sock"
PRIVATE_ENGINE_PID="${PRIVATE_ENGINE_DIR}/dockerd.pid"
PRIVATE_ENGINE_LOG="${PRIVATE_ENGINE_DIR}/dockerd.log"
# dockerd's exec root holds unix sockets: keep its path short (108-byte limit).
PRIVATE_ENGINE_EXEC_ROOT="/run/va-dockerd-$(id -u)"
STARTED_PRIVATE_ENGINE=0

engine_reachable() { "${DOCKER}" info >/dev/null 2>&1; }

_stop_private_engine_pid() {
  local pid
  pid="$(cat "${PRIVATE_ENGINE_PID}" 2>/dev/null || true)"
  [[ -n "${pid}" ]] || return 0
  if kill -0 "${pid}" 2>/dev/null && grep -q dockerd "/proc/${pid}/cmdline" 2>/dev/null; then
    kill "${pid}" 2>/dev/null || true
    for _ in $(seq 1 60); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "${pid}" 2>/dev/null; then kill -9 "${pid}" 2>/dev/null || true; fi
  fi
  rm -f "${PRIVATE_ENGINE_PID}"
}

_start_private_engine() {
  local driver="$1"
  local args=(--data-root "${PRIVATE_ENGINE_DIR}/data" --exec-root "${PRIVATE_ENGINE_EXEC_ROOT}"
    --host "unix://${PRIVATE_ENGINE_SOCK}" --pidfile "${PRIVATE_ENGINE_PID}"
    --iptables=false --ip-masq=false --bridge=none)
  if [[ -n "${driver}" ]]; then args+=(--storage-driver "${driver}"); fi
  log "starting a private dockerd (${driver:-default storage driver}); log: ${PRIVATE_ENGINE_LOG}"
  # setsid: its own session, so an interrupted make/pytest does not take it down half-way.
  setsid dockerd "${args[@]}" >"${PRIVATE_ENGINE_LOG}" 2>&1 </dev/null &
  local child=$!
  for _ in $(seq 1 60); do
    if DOCKER_HOST="unix://${PRIVATE_ENGINE_SOCK}" "${DOCKER}" info >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "${child}" 2>/dev/null; then return 1; fi
    sleep 0.5
  done
  log "dockerd did not answer within 30 s; stopping it"
  kill "${child}" 2>/dev/null || true
  return 1
}

# The error lines of the private engine's log (its last words are usually the reason it stopped).
_log_errors() {
  grep -iE 'level=(error|fatal)|^failed|failed to start' "${PRIVATE_ENGINE_LOG}" 2>/dev/null | tail -n 5 | cut -c1-300
}

# engine_up: make `docker` work, or exit ENGINE_UNAVAILABLE with the reason.
engine_up() {
  command -v "${DOCKER}" >/dev/null || engine_unavailable "no docker CLI ('${DOCKER}') on PATH" \
    "install one: hack/images/install-deps.sh docker"
  if engine_reachable; then
    log "using the running engine ($("${DOCKER}" version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
    return 0
  fi
  if [[ "${VA_PRIVATE_ENGINE:-1}" != "1" ]]; then
    engine_unavailable "no engine answers at ${DOCKER_HOST:-the default socket} and VA_PRIVATE_ENGINE=0"
  fi
  command -v dockerd >/dev/null || engine_unavailable "no engine is running and dockerd is not installed" \
    "install it: hack/images/install-deps.sh docker (Debian's docker.io), or start your own engine"
  [[ "$(id -u)" == "0" ]] || engine_unavailable "no engine is running and a private dockerd needs root" \
    "start Docker yourself (e.g. 'sudo systemctl start docker') or run as root"
  mkdir -p "${PRIVATE_ENGINE_DIR}"
  _stop_private_engine_pid  # a leftover from an interrupted run of ours
  local log_errors=()
  if ! _start_private_engine "${VA_DOCKER_STORAGE_DRIVER:-}"; then
    _stop_private_engine_pid
    if [[ -z "${VA_DOCKER_STORAGE_DRIVER:-}" ]]; then
      log "dockerd did not come up with its default storage driver; retrying with vfs"
      if ! _start_private_engine vfs; then
        _stop_private_engine_pid
        mapfile -t log_errors < <(_log_errors)
        engine_unavailable "dockerd failed to start (tried the default storage driver and vfs)" \
          "errors in ${PRIVATE_ENGINE_LOG}:" "${log_errors[@]}"
      fi
    else
      mapfile -t log_errors < <(_log_errors)
      engine_unavailable "dockerd failed to start with storage driver ${VA_DOCKER_STORAGE_DRIVER}" \
        "errors in ${PRIVATE_ENGINE_LOG}:" "${log_errors[@]}"
    fi
  fi
  STARTED_PRIVATE_ENGINE=1
  export DOCKER_HOST="unix://${PRIVATE_ENGINE_SOCK}"
  log "private engine up: ${DOCKER_HOST} ($("${DOCKER}" info --format '{{.Driver}}' 2>/dev/null) storage)"
}

# engine_down: stop the private engine if this process started it.
engine_down() {
  if [[ "${STARTED_PRIVATE_ENGINE}" == "1" ]]; then
    log "stopping the private dockerd"
    _stop_private_engine_pid
    STARTED_PRIVATE_ENGINE=0
  fi
}

# engine_can_run IMAGE: prove that the engine can start a container, or exit ENGINE_UNAVAILABLE.
engine_can_run() {
  local out
  if ! out="$("${DOCKER}" run --rm --network none --entrypoint /bin/sh "$1" -c 'echo engine-ok' 2>&1)" \
    || [[ "${out}" != *engine-ok* ]]; then
    engine_unavailable "the engine runs but cannot start a container from $1" "${out}"
  fi
}

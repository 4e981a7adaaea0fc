#!/usr/bin/env bash
# Smoke-test built images: both run as UID 65532, carry their OCI labels and hold no compiler; the operator's
# `--help` works (its entrypoint, `variant-autoscaler run`, and the top-level command); the emulator's `--help`
# works, and a container started from it (read-only root filesystem, no capabilities, no network, as
# the manifests in deploy/ and hack/kind/ run it) answers /health, serves a completion and vLLM's
# metrics, and Docker's HEALTHCHECK reports it healthy.
#
# Usage: hack/images/smoke.sh [operator|emulator ...]   (default: both; images from OPERATOR_IMAGE/EMULATOR_IMAGE)
set -euo pipefail
# shellcheck source=hack/images/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(operator emulator)
failures=0
container=""
cleanup() { if [[ -n "${container}" ]]; then "${DOCKER}" rm -f "${container}" >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT

# How Kubernetes runs them (deploy/manager, hack/kind/demo): read-only root, no capabilities, no network.
RUN_FLAGS=(--network none --read-only --cap-drop ALL --security-opt no-new-privileges)

pass() { log "ok   $*"; }
fail() { log "FAIL $*"; failures=$((failures + 1)); }

# check DESCRIPTION COMMAND...: run it, record pass/fail, keep its output in $out.
check() {
  local what="$1"
  shift
  if out="$("$@" 2>&1)"; then pass "${what}"; else fail "${what}: $(tail -n 5 <<<"${out}")"; fi
}

common_checks() {
  local image="$1" title="$2" user label
  user="$("${DOCKER}" image inspect --format '{{.Config.User}}' "${image}")"
  if [[ "${user}" == "65532:65532" ]]; then pass "${image}: USER ${user}"; else fail "${image}: USER is '${user}'"; fi
  check "${image}: runs as uid 65532" "${DOCKER}" run --rm "${RUN_FLAGS[@]}" --entrypoint id "${image}" -u
  [[ "${out}" == "65532" ]] || fail "${image}: id -u printed '${out}'"
  for label in title version revision created licenses; do
    local value
    value="$("${DOCKER}" image inspect --format "{{index .Config.Labels \"org.opencontainers.image.${label}\"}}" "${image}")"
    if [[ -n "${value}" ]]; then pass "${image}: label ${label}=${value}"; else fail "${image}: no label ${label}"; fi
  done
  value="$("${DOCKER}" image inspect --format '{{index .Config.Labels "org.opencontainers.image.title"}}' "${image}")"
  [[ "${value}" == "${title}" ]] || fail "${image}: title label is '${value}', expected '${title}'"
  # shellcheck disable=SC2016  # expanded by the container's shell
  check "${image}: no compiler, no pip in the venv" "${DOCKER}" run --rm "${RUN_FLAGS[@]}" --entrypoint /bin/sh \
    "${image}" -c 'for c in cc gcc c++ g++ clang make /opt/venv/bin/pip; do
        if command -v "$c" >/dev/null; then echo "found $c"; exit 1; fi; done'
}

smoke_operator() {
  local image="${OPERATOR_IMAGE}"
  log "operator image ${image}"
  common_checks "${image}" variant-autoscaler
  check "${image}: '--help' (variant-autoscaler run --help)" "${DOCKER}" run --rm "${RUN_FLAGS[@]}" "${image}" --help
  [[ "${out}" == *usage:* ]] || fail "${image}: --help printed no usage: ${out}"
  check "${image}: 'variant-autoscaler --help'" \
    "${DOCKER}" run --rm "${RUN_FLAGS[@]}" --entrypoint variant-autoscaler "${image}" --help
}

smoke_emulator() {
  local image="${EMULATOR_IMAGE}" i status
  log "emulator image ${image}"
  common_checks "${image}" vllm-emulator
  check "${image}: '--help'" "${DOCKER}" run --rm "${RUN_FLAGS[@]}" "${image}" --help
  [[ "${out}" == *usage:* ]] || fail "${image}: --help printed no usage: ${out}"
  check "${image}: 'vllm-loadgen --help'" \
    "${DOCKER}" run --rm "${RUN_FLAGS[@]}" --entrypoint vllm-loadgen "${image}" --help
  check "${image}: no operator code in the emulator image" "${DOCKER}" run --rm "${RUN_FLAGS[@]}" \
    --entrypoint python3 "${image}" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("variant_autoscaler") is not None)'

  # The image's own CMD, in a container with only a loopback interface; probed from inside it.
  container="$("${DOCKER}" run --detach "${RUN_FLAGS[@]}" --health-interval 1s --health-start-period 30s "${image}")"
  # GET PATH, or POST PATH JSON; prints the body, fails on an HTTP error.
  local probe='import sys, urllib.request
body = sys.argv[2].encode() if len(sys.argv) > 2 else None
req = urllib.request.Request("http://127.0.0.1:8000" + sys.argv[1], data=body,
                             headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=10) as r:
    sys.stdout.write(r.read().decode())'
  out=""
  for i in $(seq 1 60); do
    if out="$("${DOCKER}" exec "${container}" python3 -c "${probe}" /health 2>&1)"; then break; fi
    if [[ "$("${DOCKER}" inspect --format '{{.State.Running}}' "${container}")" != "true" ]]; then
      break
    fi
    sleep 0.5
    [[ ${i} -eq 60 ]] && out="no answer on /health after 30 s: ${out}"
  done
  if [[ "$("${DOCKER}" inspect --format '{{.State.Running}}' "${container}")" != "true" ]]; then
    fail "${image}: the container exited: $("${DOCKER}" logs --tail 20 "${container}" 2>&1)"
  elif "${DOCKER}" exec "${container}" python3 -c "${probe}" /health >/dev/null 2>&1; then
    pass "${image}: GET /health -> ${out:0:80}"
    check "${image}: POST /v1/completions" "${DOCKER}" exec "${container}" python3 -c "${probe}" \
      /v1/completions '{"model": "default/default", "prompt": "hello", "max_tokens": 4}'
    [[ "${out}" == *choices* ]] || fail "${image}: /v1/completions answered: ${out:0:200}"
    check "${image}: GET /metrics" "${DOCKER}" exec "${container}" python3 -c "${probe}" /metrics
    [[ "${out}" == *vllm:request_success_total* ]] || fail "${image}: /metrics has no vllm:request_success_total"
    status=""
    for i in $(seq 1 30); do
      status="$("${DOCKER}" inspect --format '{{.State.Health.Status}}' "${container}")"
      [[ "${status}" == healthy ]] && break
      sleep 1
    done
    if [[ "${status}" == healthy ]]; then pass "${image}: HEALTHCHECK healthy"; else fail "${image}: HEALTHCHECK ${status}"; fi
  else
    fail "${image}: /health: ${out}; logs: $("${DOCKER}" logs --tail 20 "${container}" 2>&1)"
  fi
  "${DOCKER}" rm -f "${container}" >/dev/null
  container=""
}

for target in "${targets[@]}"; do
  case "${target}" in
    operator) smoke_operator ;;
    emulator) smoke_emulator ;;
    *) die "unknown image '${target}'" ;;
  esac
done
if [[ ${failures} -gt 0 ]]; then
  log "${failures} check(s) failed"
  exit 1
fi
log "all checks passed"

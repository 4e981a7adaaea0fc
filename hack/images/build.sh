#!/usr/bin/env bash
# Build the operator image (Dockerfile) and/or the emulator image (emulator/Dockerfile).
#
# Usage: hack/images/build.sh [--base IMAGE] [--offline] [operator|emulator ...]   (default: both)
#   --base IMAGE   the BASE_IMAGE build argument (default: the Dockerfiles' digest-pinned python:3.11-slim)
#   --offline      take every Python package from the local wheelhouse (hack/images/wheelhouse.sh), served on a
#                  loopback port for the duration of the build; the build runs with --network host so it can
#                  reach it. No package index is contacted.
# Environment: OPERATOR_IMAGE (variant-autoscaler:dev), EMULATOR_IMAGE (vllm-emulator:dev), DOCKER (docker),
#              VA_DOCKER_BUILD_ARGS (extra arguments for every `docker build`).
set -euo pipefail
# shellcheck source=hack/images/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

base=""
offline=0
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --base) base="${2:?--base needs an image}"; shift 2 ;;
    --offline) offline=1; shift ;;
    operator | emulator) targets+=("$1"); shift ;;
    -h | --help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=(operator emulator)

command -v "${DOCKER}" >/dev/null || die "no docker CLI on PATH (hack/images/install-deps.sh docker)"
engine_reachable || die "no Docker engine answers (${DOCKER_HOST:-default socket}); start Docker, or use hack/images/test.sh, which can start a private one"

args=(--build-arg "VERSION=$(project_version)" --build-arg "REVISION=$(git_revision)"
  --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)")
source_url="$(git -C "${REPO_ROOT}" remote get-url origin 2>/dev/null || true)"
if [[ "${source_url}" == https://* ]]; then args+=(--build-arg "SOURCE=${source_url}"); fi
if [[ -n "${base}" ]]; then args+=(--build-arg "BASE_IMAGE=${base}"); fi
if [[ -n "${VA_DOCKER_BUILD_ARGS:-}" ]]; then
  read -r -a extra <<<"${VA_DOCKER_BUILD_ARGS}"
  args+=("${extra[@]}")
fi

server_pid=""
cleanup() { if [[ -n "${server_pid}" ]]; then kill "${server_pid}" 2>/dev/null || true; fi; }
trap cleanup EXIT

if [[ ${offline} == 1 ]]; then
  wheels="$("${IMAGES_DIR}/wheelhouse.sh")"
  port_file="$(mktemp)"
  # A loopback-only file server on a free port; it writes the port once it listens.
  python3 - "${wheels}" "${port_file}" <<'PY' &
import functools, http.server, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args): pass
handler = functools.partial(Quiet, directory=sys.argv[1])
with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
    with open(sys.argv[2], "w") as fh:
        fh.write(str(httpd.server_address[1]))
    httpd.serve_forever()
PY
  server_pid=$!
  for _ in $(seq 1 50); do [[ -s "${port_file}" ]] && break; sleep 0.1; done
  [[ -s "${port_file}" ]] || die "the wheelhouse server did not start"
  port="$(cat "${port_file}")"
  rm -f "${port_file}"
  log "serving the wheelhouse ${wheels} on 127.0.0.1:${port}"
  args+=(--network host --build-arg "PACKAGE_INDEX_FLAGS=--no-index --find-links http://127.0.0.1:${port}/")
fi

for target in "${targets[@]}"; do
  case "${target}" in
    # The operator's context is the repository (its wheel holds both packages); the emulator's is emulator/.
    operator) image="${OPERATOR_IMAGE}"; context="${REPO_ROOT}" ;;
    emulator) image="${EMULATOR_IMAGE}"; context="${REPO_ROOT}/emulator" ;;
  esac
  dockerfile="${context}/Dockerfile"
  log "building ${image} from ${dockerfile#"${REPO_ROOT}"/}${base:+ on ${base}}"
  start=${SECONDS}
  "${DOCKER}" build --file "${dockerfile}" --tag "${image}" "${args[@]}" "${context}"
  log "built ${image} in $((SECONDS - start)) s ($("${DOCKER}" image inspect --format '{{.Size}}' "${image}" |
    awk '{printf "%.0f MB", $1 / 1e6}'))"
done

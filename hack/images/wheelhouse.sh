#!/usr/bin/env bash
# Download the wheels pinned in hack/images/constraints.txt into a cache outside the repository, so an image
# build needs no package index: the build is pointed at them through a loopback HTTP server (build.sh
# --offline). A wheelhouse is keyed by the hash of constraints.txt; a second run with the same file does
# nothing. Prints the wheelhouse directory on stdout.
#
# Usage: hack/images/wheelhouse.sh        (PYTHON defaults to the project's .venv/bin/python, then python3)
set -euo pipefail
# shellcheck source=hack/images/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PYTHON="${PYTHON:-${REPO_ROOT}/.venv/bin/python}"
[[ -x "${PYTHON}" ]] || PYTHON="$(command -v python3)"
constraints="${IMAGES_DIR}/constraints.txt"
key="$(sha256sum "${constraints}" | cut -c1-16)"
root="${IMAGES_CACHE}/wheelhouse"
dest="${root}/${key}"

if [[ -f "${dest}/.complete" ]]; then
  log "wheelhouse cached: ${dest}"
else
  mkdir -p "${root}"
  rm -rf "${dest}.partial"
  log "downloading $(grep -c '==' "${constraints}") pinned wheels into ${dest}"
  "${PYTHON}" -m pip download --quiet --no-deps --only-binary=:all: \
    --requirement "${constraints}" --dest "${dest}.partial"
  touch "${dest}.partial/.complete"
  rm -rf "${dest}"
  mv "${dest}.partial" "${dest}"
  # Older wheelhouses (other constraints) are of no further use.
  find "${root}" -mindepth 1 -maxdepth 1 -type d ! -name "${key}" -exec rm -rf {} +
fi
printf '%s\n' "${dest}"

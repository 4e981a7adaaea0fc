#!/usr/bin/env bash
# What CI runs for the images (make images-test; tests/integration/test_images.py): with no registry in
# reach, build both images on a base made locally (base.sh: debootstrap + docker import) from the pinned
# wheels (wheelhouse.sh, served on loopback), then smoke-test them (smoke.sh).
#
# A Docker engine is used if one answers; otherwise, as root, a private dockerd is started for the run and
# stopped after it. If no engine can run, this says so in a banner and exits 3: nothing passes quietly.
# The debootstrap tarball, the wheelhouse and the private engine's layers are cached under
# ${VA_CACHE_DIR:-~/.cache/variant-autoscaler}, so a second run only rebuilds what changed.
#
# Usage: hack/images/test.sh        (images: OPERATOR_IMAGE, EMULATOR_IMAGE; default *:images-test)
set -euo pipefail
export OPERATOR_IMAGE="${OPERATOR_IMAGE:-variant-autoscaler:images-test}"
export EMULATOR_IMAGE="${EMULATOR_IMAGE:-vllm-emulator:images-test}"
# shellcheck source=hack/images/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "${CACHE_DIR}"
exec 9>"${CACHE_DIR}/images-test.lock"
if ! flock --timeout 900 9; then die "another hack/images/test.sh holds ${CACHE_DIR}/images-test.lock"; fi

started=${SECONDS}
trap engine_down EXIT
engine_up
base="$("${IMAGES_DIR}/base.sh")"
engine_can_run "${base}"
"${IMAGES_DIR}/build.sh" --offline --base "${base}"
"${IMAGES_DIR}/smoke.sh"
if [[ "${STARTED_PRIVATE_ENGINE}" == "1" ]]; then
  "${DOCKER}" image prune --force >/dev/null  # dangling layers of earlier builds, in our own engine only
fi
log "images built and verified in $((SECONDS - started)) s"

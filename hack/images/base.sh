#!/usr/bin/env bash
# Build a local base image for the operator and emulator images when no registry can be reached: a minimal
# Debian bookworm made with debootstrap (python3, python3-venv, ca-certificates), then `docker import`.
# The root filesystem tarball is cached outside the repository, keyed by suite, mirror and package list, so
# a second run only re-imports it (or does nothing if the image is already there). Prints the image
# reference on stdout.
#
# Needs root (debootstrap), debootstrap (hack/images/install-deps.sh debootstrap) and a Docker engine.
#
# Environment: VA_DEBIAN_SUITE (bookworm), VA_DEBIAN_MIRROR (http://deb.debian.org/debian),
#              VA_BASE_IMAGE_REPO (variant-autoscaler/base)
set -euo pipefail
# shellcheck source=hack/images/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SUITE="${VA_DEBIAN_SUITE:-bookworm}"
MIRROR="${VA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-venv,ca-certificates"
REPO="${VA_BASE_IMAGE_REPO:-variant-autoscaler/base}"

key="$(printf '%s|%s|%s|%s' "${SUITE}" "${MIRROR}" "${PACKAGES}" "$(uname -m)" | sha256sum | cut -c1-12)"
tarball="${IMAGES_CACHE}/base-${SUITE}-${key}.tar"
image="${REPO}:${SUITE}-${key}"

if "${DOCKER}" image inspect "${image}" >/dev/null 2>&1; then
  log "base image present: ${image}"
  printf '%s\n' "${image}"
  exit 0
fi

if [[ ! -f "${tarball}" ]]; then
  [[ "$(id -u)" == "0" ]] || die "debootstrap needs root (or a cached ${tarball})"
  command -v debootstrap >/dev/null || die "debootstrap is not installed: hack/images/install-deps.sh debootstrap"
  mkdir -p "${IMAGES_CACHE}"
  rootfs="$(mktemp -d "${IMAGES_CACHE}/rootfs.XXXXXX")"
  trap 'rm -rf "${rootfs}" "${tarball}.partial"' EXIT
  log "debootstrap ${SUITE} (minbase + ${PACKAGES}) from ${MIRROR}; about a minute"
  if ! debootstrap --variant=minbase --include="${PACKAGES}" "${SUITE}" "${rootfs}" "${MIRROR}" \
    >"${IMAGES_CACHE}/debootstrap.log" 2>&1; then
    tail -n 20 "${IMAGES_CACHE}/debootstrap.log" >&2
    die "debootstrap failed; full log: ${IMAGES_CACHE}/debootstrap.log"
  fi
  # What an image does not need: package caches and lists, documentation, man pages, translations.
  rm -rf "${rootfs}"/var/cache/apt/archives/*.deb "${rootfs}"/var/cache/apt/*.bin \
    "${rootfs}"/var/lib/apt/lists/* "${rootfs}"/usr/share/doc/* "${rootfs}"/usr/share/man/* \
    "${rootfs}"/usr/share/info/* "${rootfs}"/usr/share/locale/* "${rootfs}"/var/log/*.log \
    "${rootfs}"/var/log/apt/* "${rootfs}"/tmp/*
  # Same file order and owners every time.
  tar --numeric-owner --sort=name -C "${rootfs}" -cf "${tarball}.partial" .
  mv "${tarball}.partial" "${tarball}"
  rm -rf "${rootfs}"
  trap - EXIT
  log "cached ${tarball} ($(du -h "${tarball}" | cut -f1))"
fi

log "importing ${tarball} as ${image}"
"${DOCKER}" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  --message "debootstrap --variant=minbase --include=${PACKAGES} ${SUITE} (hack/images/base.sh)" \
  "${tarball}" "${image}" >/dev/null
printf '%s\n' "${image}"

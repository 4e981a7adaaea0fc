# variant-autoscaler operator image.
#
#   docker build -t variant-autoscaler:dev .                       (or: make docker-build)
#
# Build arguments:
#   BASE_IMAGE            Python 3.11 on Debian, used for both stages. The default is the official image,
#                         pinned by digest; CI passes a base made locally (hack/images/base.sh). Any Debian-
#                         based image with python3, `python3 -m venv` and useradd works.
#   PACKAGE_INDEX_FLAGS   extra pip flags saying where packages come from, e.g. a mirror
#                         ("--index-url https://mirror/simple") or a local wheelhouse
#                         ("--no-index --find-links http://127.0.0.1:8000/", what hack/images/build.sh does).
#   VERSION, REVISION, CREATED, SOURCE   OCI labels (hack/images/build.sh fills them in from git).
#
# The final stage holds the interpreter from the base, one virtualenv with the project and its pinned
# dependencies (hack/images/constraints.txt; numpy's and scipy's own test suites left out), no pip and no
# compiler, and runs as UID 65532.

ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# ---- build: the wheel, then a virtualenv with it and its dependencies ------------------------------------
FROM ${BASE_IMAGE} AS build
ARG PACKAGE_INDEX_FLAGS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY hack/images/constraints.txt hack/images/constraints.txt
COPY operator/ operator/
COPY emulator/ emulator/
ENV PIP_PROGRESS_BAR=off
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip wheel ${PACKAGE_INDEX_FLAGS} --no-deps --wheel-dir /dist . \
 && /opt/venv/bin/pip install ${PACKAGE_INDEX_FLAGS} --only-binary=:all: \
      --constraint hack/images/constraints.txt /dist/*.whl \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/pip uninstall --quiet --yes pip setuptools \
 && site="$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
 && find "${site}/numpy" "${site}/scipy" -type d -name tests -prune -exec rm -rf {} +

# ---- runtime ------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}
ARG VERSION=0.0.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
ARG SOURCE=""
ARG BASE_IMAGE
LABEL org.opencontainers.image.title="variant-autoscaler" \
      org.opencontainers.image.description="SLO- and cost-aware autoscaler for LLM inference servers (vLLM) on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
RUN useradd --uid 65532 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /tmp
# Kubernetes probes the operator itself (deploy/manager); Docker's HEALTHCHECK would need the same port
# and adds nothing there.
ENTRYPOINT ["variant-autoscaler", "run"]

# syntax=docker/dockerfile:1
# gpu-exporter container image.
#
#   docker build -t gpu-exporter .                 # or: podman build -t gpu-exporter .
#   docker run --rm --runtime nvidia --gpus all -p 9400:9400 gpu-exporter
#
# Build arguments:
#   BASE_IMAGE  any image with python3 (3.11 or newer) and its venv module: the default official slim
#               Python image, or a plain Debian bookworm with python3 and python3-venv installed.
#               The build and the final stage use the same base, so the venv's interpreter exists.
#   VERSION     the version written into the OCI labels.
# Behind a TLS-intercepting proxy, give its CA bundle as the build secret `pip-ca`:
#   podman build --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt -t gpu-exporter .
# The secret is mounted only while pip runs and is not part of any layer.
#
# Targets: `runtime` (the default, last stage): NVML only, non-root. `dcgm`: the same plus NVIDIA's
# DCGM 4 libraries and Python bindings from NVIDIA's CUDA apt repository (needs a Debian 12 base and
# access to that repository), for `--backend dcgm` and profiling metrics:
#   docker build --target dcgm --build-arg BASE_IMAGE=debian:bookworm-slim -t gpu-exporter:dcgm .
# (debian:bookworm-slim lacks python3: use an image with python3 and python3-venv added.)

ARG BASE_IMAGE=python:3.12-slim-bookworm

# --- build: a virtual environment with gpu-exporter and its dependencies --------------------------
FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN --mount=type=secret,id=pip-ca \
    set -eu; \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi; \
    python3 -m venv /opt/gpu-exporter; \
    /opt/gpu-exporter/bin/python -m pip install --no-cache-dir --disable-pip-version-check --no-input /src; \
    /opt/gpu-exporter/bin/python -m pip uninstall --yes --no-input pip; \
    mkdir -p /out/etc/dcgm-exporter; \
    /opt/gpu-exporter/bin/python -c 'import sys; from gpu_exporter.compat.counters import DEFAULT_COUNTERS_CSV as c; sys.stdout.write(c)' \
        > /out/etc/dcgm-exporter/default-counters.csv

# --- common runtime layer ------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS base
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpu-exporter" \
      org.opencontainers.image.description="Prometheus exporter for NVIDIA GPUs: NVML or DCGM, background sampling, honest absence." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/OWNER/gpu-exporter"
# The NVIDIA container runtime mounts the driver's NVML into the container when these are set;
# `utility` is all NVML needs (no CUDA).
ENV PATH=/opt/gpu-exporter/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
COPY --from=build /opt/gpu-exporter /opt/gpu-exporter
# dcgm-exporter's counters file at the path NVIDIA's image and Helm chart use (`-f` with that path works).
COPY --from=build /out/etc/dcgm-exporter/default-counters.csv /etc/dcgm-exporter/default-counters.csv
EXPOSE 9400
# The exporter handles SIGTERM itself (also as PID 1, where an unhandled SIGTERM would be ignored)
# and shuts down in well under a second; no init process is needed.
STOPSIGNAL SIGTERM
ENTRYPOINT ["gpu-exporter"]

# --- dcgm: NVIDIA's DCGM 4 bindings and libraries (optional variant) ------------------------------
FROM base AS dcgm
ARG DCGM_REPO=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64
# Empty: the repository's newest DCGM 4; or an exact package version, e.g. 1:4.2.3-1.
ARG DCGM_VERSION=
USER 0
# hadolint ignore=DL3008
RUN set -eu; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates curl; \
    curl -fsSL -o /tmp/cuda-keyring.deb "${DCGM_REPO}/cuda-keyring_1.1-1_all.deb"; \
    dpkg -i /tmp/cuda-keyring.deb; \
    rm /tmp/cuda-keyring.deb; \
    apt-get update; \
    apt-get install -y --no-install-recommends \
        "datacenter-gpu-manager-4-core${DCGM_VERSION:+=$DCGM_VERSION}" \
        "datacenter-gpu-manager-4-proprietary${DCGM_VERSION:+=$DCGM_VERSION}"; \
    apt-get purge -y curl; \
    apt-get autoremove -y; \
    rm -rf /var/lib/apt/lists/*
# DCGM's embedded host engine and profiling metrics need root or CAP_SYS_ADMIN (see the Kubernetes
# `dcgm` overlay); the image still defaults to an unprivileged user.
USER 65534:65534

# --- runtime: the default image (NVML) ------------------------------------------------------------
FROM base AS runtime
USER 65534:65534

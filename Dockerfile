# One image for the whole lab: the Flask app and its asyncio twin under every server model, the
# mock slow upstream, locust and the `lab` CLI. compose.yaml runs each of them as its own service.
#
# Build arguments:
#   PYTHON_VERSION  CPython version of the default (official) images
#   BASE_IMAGE      runtime stage: a slim image with python3 (and its shared libpython)
#   BUILD_IMAGE     build stage: the same Python plus a C compiler and headers (uWSGI is compiled)
#   WHEELHOUSE      1 = install only from docker/wheelhouse/ (no index; see prepare-wheelhouse.sh)
# Machines without a reachable registry build both images with docker/build-base.sh instead;
# docker/build-image.sh picks the right arguments automatically.
ARG PYTHON_VERSION=3.12
ARG BASE_IMAGE=python:${PYTHON_VERSION}-slim
ARG BUILD_IMAGE=python:${PYTHON_VERSION}

FROM ${BUILD_IMAGE} AS build
ARG WHEELHOUSE=0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
# Dependencies first (from pyproject.toml alone), so editing the lab's code reuses this layer.
# The wheelhouse glob matches nothing when there is no wheelhouse; COPY then takes pyproject only.
COPY pyproject.toml docker/wheelhouse* /tmp/wheelhouse/
RUN set -eu; \
    if [ "$WHEELHOUSE" = 1 ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wheelhouse; fi; \
    python3 -c 'import sys, tomllib; \
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' \
        /tmp/wheelhouse/pyproject.toml > /tmp/requirements.txt; \
    python3 -m venv /opt/lab; \
    /opt/lab/bin/pip install "setuptools>=68" wheel; \
    /opt/lab/bin/pip install -r /tmp/requirements.txt; \
    /opt/lab/bin/uwsgi --version
# Tagged by docker/build-image.sh (NAME:build) so superseded build stages can be pruned by label.
LABEL concurrency-lab.stage=build

# The lab's own code without the Docker tooling (the context may carry a large wheelhouse).
FROM ${BASE_IMAGE} AS source
COPY . /src
RUN rm -rf /src/docker /src/build
LABEL concurrency-lab.stage=source

FROM ${BASE_IMAGE} AS runtime
ARG PYTHON_VERSION
LABEL org.opencontainers.image.title="concurrency-lab" \
      org.opencontainers.image.description="Python server concurrency models under a slow upstream" \
      lab.python-version="${PYTHON_VERSION}" \
      concurrency-lab.stage=runtime
# A fixed numeric non-root user, so Compose, Kubernetes and bind-mount ownership can rely on it.
RUN groupadd --system --gid 10001 lab \
    && useradd --system --uid 10001 --gid lab --no-create-home --home-dir /app \
        --shell /usr/sbin/nologin lab
# PostgreSQL and Redis for the `databases` profile, nginx-light for `--front nginx`: Debian base
# images (docker/build-base.sh) have them; the official python images get them here, from Debian's
# packages (policy-rc.d: no service is started at install; the lab runs its own per run). One
# `command -v` per program: dash's `command -v a b` answers for the first name only.
RUN if ! command -v redis-server >/dev/null || ! command -v nginx >/dev/null \
        || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; \
    then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
        && apt-get update -q && apt-get install -y -q --no-install-recommends postgresql redis-server \
            nginx-light \
        && rm -rf /var/lib/apt/lists/* /var/lib/postgresql/*/main /etc/postgresql/*/main \
            /usr/sbin/policy-rc.d; fi
COPY --from=build /opt/lab /opt/lab
# The lab's own code last and small: a code change rebuilds only these two layers. The editable
# install adds just the `lab` command and a path entry to the venv; the code stays root-owned.
COPY --from=source /src /app
RUN PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 /opt/lab/bin/pip install -q --no-deps \
        --no-build-isolation --no-index --editable /app \
    && /opt/lab/bin/python -m compileall -q /app \
    && rm -rf /app/build
# Read-only root filesystem in Compose: bytecode is precompiled, scratch files go to /tmp (tmpfs).
ENV PATH=/opt/lab/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    HOME=/tmp
WORKDIR /app
USER 10001:10001
EXPOSE 8000 8089 5557
CMD ["lab", "--help"]

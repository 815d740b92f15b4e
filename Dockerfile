# A Cairn node in a container (issue 20 item 5; docs/container.md). Three stages:
#   kubo    Kubo built from its Go module source, as `make setup` does (scripts/setup/kubo.sh: `go install` refuses
#           Kubo's go.mod `exclude` directives, so the module is downloaded and `go build` runs on it)
#   python  a venv with the hash-checked locks installed as the Makefile installs them, then the project
#   runtime Python, a JRE 17 for the Spark worker, the venv and Kubo; runs as the non-root user `cairn`
# Docker cannot run where the tests run: tests/unit/test_container.py lints this file (hadolint) and
# tests/integration/test_container_steps.py runs the `python` stage's own RUN lines through
# scripts/container_steps.py (a fresh venv from the hash-checked locks).

FROM golang:1.26-bookworm AS kubo
# kubo.sh reads `go mod download -json` with python3; Debian's current packages, not pinned versions
# (.hadolint.yaml: DL3008), so security updates land at each build.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*
COPY scripts/setup/kubo.sh /src/kubo.sh
RUN CAIRN_CACHE=/cache bash /src/kubo.sh && cp /cache/kubo/v0.42.0/ipfs /usr/local/bin/ipfs

FROM python:3.11-slim-bookworm AS python
# A compiler for the locked packages that ship no wheel for this platform (gmpy2 and friends).
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libgmp-dev make \
    && rm -rf /var/lib/apt/lists/*
# Paths come from ENV so that scripts/container_steps.py can run these very RUN lines under a scratch root.
ENV VENV=/opt/venv \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements-pip.lock requirements.lock pyproject.toml README.md ./
# Hash-checked, as in the Makefile: pip, setuptools and pip-tools first, then the resolved set.
RUN python -m venv "$VENV" \
    && "$VENV/bin/python" -m pip install --require-hashes -r requirements-pip.lock \
    && "$VENV/bin/python" -m pip install --require-hashes -r requirements.lock
COPY config ./config
COPY node ./node
COPY p2p ./p2p
COPY spark_worker ./spark_worker
# The project itself last, without dependencies and without build isolation (the pinned setuptools builds it).
RUN "$VENV/bin/python" -m pip install --no-deps --no-build-isolation .

FROM python:3.11-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless libgmp10 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 1000 cairn \
    && useradd --system --uid 1000 --gid cairn --home-dir /data --no-create-home cairn \
    && mkdir -p /data && chown cairn:cairn /data
COPY --from=kubo /usr/local/bin/ipfs /usr/local/bin/ipfs
COPY --from=python /opt/venv /opt/venv
COPY scripts/container-entrypoint.sh /usr/local/bin/cairn-entrypoint
# Reachable from other containers: the API, the p2p host and Kubo's swarm listen beyond loopback, on fixed ports
# (docs/configuration.md). Kubo's RPC API and gateway stay on loopback. Publish 7420 only behind a proxy you trust.
ENV PATH=/opt/venv/bin:$PATH \
    CAIRN_HOME=/data \
    CAIRN_API_HOST=0.0.0.0 \
    CAIRN_API_PORT=7420 \
    CAIRN_PEERS_LISTEN=/ip4/0.0.0.0/tcp/4002 \
    CAIRN_IPFS_SWARM_HOST=0.0.0.0 \
    CAIRN_IPFS_SWARM_PORT=4001
# The `cairn` user made above, by number: a host (Kubernetes runAsNonRoot) can check it is not root.
USER 1000:1000
WORKDIR /data
VOLUME /data
EXPOSE 7420 4001 4002
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:7420/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["cairn-entrypoint"]
CMD ["cairn", "node", "start"]

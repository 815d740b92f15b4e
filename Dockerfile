# A Cairn node in a container: Kubo built from source (pinned), Python deps from the lock file, Java for Spark.
FROM golang:1.26-bookworm AS kubo
COPY scripts/setup/kubo.sh /kubo.sh
RUN apt-get update && apt-get install -y --no-install-recommends python3 && \
    CAIRN_CACHE=/cache bash /kubo.sh

FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless gcc libgmp-dev make && rm -rf /var/lib/apt/lists/*
COPY --from=kubo /cache/kubo/v0.42.0/ipfs /usr/local/bin/ipfs
WORKDIR /app
COPY requirements-pip.lock requirements.lock pyproject.toml README.md ./
# Hash-checked, as in the Makefile: pip and setuptools first, then the resolved set, then the project itself.
RUN pip install --no-cache-dir --require-hashes -r requirements-pip.lock && \
    pip install --no-cache-dir --require-hashes -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps --no-build-isolation -e .
ENV CAIRN_HOME=/data
VOLUME /data
EXPOSE 7420
# Inside a container the API must bind beyond loopback to be reachable; keep the port unpublished
# or behind a proxy unless you mean to expose it.
CMD ["cairn", "node", "start", "--api-host", "0.0.0.0"]

# The tierlog image: the broker sidecar (`tierlog-sidecar`) and the operator
# (`tierlog-operator`), one Python environment, run as a non-root user.
#
#   docker build -t ghcr.io/tierlog/tierlog:0.1.0 .
#
# Build stage: a venv with the project and its runtime dependencies (wheels only, no
# compilers in the final image). Runtime stage: that venv on a slim Python, nothing
# written at run time outside the volumes (the data dir, /tmp), so the pods run with a
# read-only root filesystem.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/tierlog
WORKDIR /src
COPY . .
# Compiled now, so a read-only root filesystem never needs to write .pyc files.
RUN /opt/tierlog/bin/pip install . \
 && /opt/tierlog/bin/python -m compileall -q /opt/tierlog \
 && /opt/tierlog/bin/tierlog-sidecar --help > /dev/null \
 && /opt/tierlog/bin/tierlog-operator --help > /dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="tierlog" \
      org.opencontainers.image.description="Kafka-format log store with tiered storage: sidecar and operator" \
      org.opencontainers.image.licenses="Apache-2.0"
# The uid/gid the chart's and the operator's pods run as (runAsUser: 10001).
RUN groupadd --system --gid 10001 tierlog \
 && useradd --system --uid 10001 --gid tierlog --home-dir /var/lib/tierlog \
      --no-create-home --shell /usr/sbin/nologin tierlog \
 && install -d -o tierlog -g tierlog -m 0750 /var/lib/tierlog
COPY --from=build /opt/tierlog /opt/tierlog
ENV PATH=/opt/tierlog/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/tierlog
# The broker's data (the StatefulSet's volume claim mounts here).
VOLUME ["/var/lib/tierlog"]
# The broker's gRPC (9092) and its /metrics, /healthz and /readyz (9404), as the operator
# renders the sidecar's config; the operator's own /metrics (--metrics-port, 9100) and
# its liveness probe (--liveness, 8080), as the chart runs it. All are set by flags:
# EXPOSE only documents them (tests/deploy/test_dockerfile.py keeps them in step).
EXPOSE 9092 9404 9100 8080
# No entry point: pods choose `tierlog-sidecar ...` or `tierlog-operator ...` as their command.
CMD ["tierlog-sidecar", "--help"]

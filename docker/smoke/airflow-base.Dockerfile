# Stand-in for apache/airflow:3.3.2-python3.11 where Docker Hub cannot be reached (scripts/docker-smoke.sh):
# Debian bookworm's Python 3.11, Apache Airflow from PyPI with the project's tested constraints, the image's
# conventions (user airflow uid 50000 gid 0, AIRFLOW_HOME=/opt/airflow, `pip install` as that user, an entrypoint
# that runs `airflow ARGS` or a given command, curl for healthchecks).
ARG BASE_IMAGE=local/debian:bookworm
FROM ${BASE_IMAGE}

ARG AIRFLOW_VERSION=3.3.2
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv curl ca-certificates \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home --shell /bin/bash airflow \
 && mkdir -p /opt/airflow /opt/venv && chown 50000:0 /opt/airflow /opt/venv

# the host's CA bundle and pip settings (this machine reaches PyPI only through them)
COPY ca-certificates.crt /etc/ssl/certs/gpusched-host-ca.crt
ENV PIP_CERT=/etc/ssl/certs/gpusched-host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 LANG=C.UTF-8 \
    AIRFLOW_HOME=/opt/airflow PATH=/opt/venv/bin:$PATH
COPY airflow-base-entrypoint.sh /entrypoint
COPY constraints.txt /tmp/constraints.txt
USER 50000
WORKDIR /opt/airflow
RUN python3 -m venv /opt/venv \
 && pip install --no-cache-dir -c /tmp/constraints.txt "apache-airflow==${AIRFLOW_VERSION}"
ENTRYPOINT ["/entrypoint"]
CMD ["version"]

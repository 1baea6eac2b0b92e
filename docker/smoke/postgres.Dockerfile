# Stand-in for Docker Hub's postgres image where Docker Hub cannot be reached (scripts/docker-smoke.sh): Debian
# bookworm's PostgreSQL 15 with the official image's interface (POSTGRES_USER/PASSWORD/DB, PGDATA, `postgres ARGS`).
ARG BASE_IMAGE=local/debian:bookworm
FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql
ENV LANG=C.UTF-8 PGDATA=/var/lib/postgresql/data PATH=/usr/lib/postgresql/15/bin:$PATH
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
CMD ["postgres"]

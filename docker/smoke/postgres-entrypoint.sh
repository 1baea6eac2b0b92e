#!/bin/bash
# The official postgres image's start-up, reduced to what docker/compose.yaml uses: a first start creates the
# cluster with POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB (password authentication over TCP), then
# `postgres ARGS` runs as the postgres user.
set -euo pipefail
if [ "${1:-}" != postgres ]; then exec "$@"; fi
shift
chown postgres:postgres "$PGDATA"; chmod 0700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"; chown postgres "$pwfile"; printf '%s' "$POSTGRES_PASSWORD" >"$pwfile"
  runuser -u postgres -- initdb -D "$PGDATA" -U "$POSTGRES_USER" --encoding=UTF8 --locale=C.UTF-8 --pwfile="$pwfile" --auth-host=scram-sha-256 --auth-local=trust >/dev/null
  rm -f "$pwfile"
  echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
  port=5432; args=("$@")
  for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[$i]}" != -p ] || port="${args[$((i + 1))]}"; done
  runuser -u postgres -- pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p $port" -w start >/dev/null
  db="${POSTGRES_DB:-$POSTGRES_USER}"
  [ "$db" = postgres ] || runuser -u postgres -- createdb -h /var/run/postgresql -p "$port" -U "$POSTGRES_USER" -- "$db"
  runuser -u postgres -- pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec runuser -u postgres -- postgres -c listen_addresses='*' "$@"

#!/bin/bash
# Like apache/airflow's entrypoint for what docker/compose.yaml uses: `airflow ARGS`, unless the first argument
# is a shell, python or `airflow` itself.
set -euo pipefail
case "${1:-}" in
  bash|sh|python|python3) exec "$@" ;;
  airflow) shift ;;
esac
exec airflow "$@"

"""Print the plugin API's OpenAPI schema (the FastAPI app the api-server mounts at /gpusched), sorted, so that
ui/openapi.json only changes when the API does. Run by ``npm run gen:api`` and checked by tests/ui/test_frontend.py."""

import json
import sys

from airflow_provider_gpusched.plugins.api import create_app

json.dump(create_app().openapi(), sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")

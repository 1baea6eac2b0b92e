"""The sweep spec: its record, file and JSON Schema, the search-kind interface and registry it asks, and its
``tracking:`` settings. It knows search kinds and pruning rules by their registries only."""

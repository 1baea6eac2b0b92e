"""The JSON Schema of a sweep spec file (``gpusched sweep schema``), for editors that complete and check YAML
(the YAML language server: ``# yaml-language-server: $schema=sweep.schema.json`` at the top of a spec).

Made from the spec's own definitions, so it cannot drift from them: every field of :class:`SweepSpec` and of its
parts (resources, objective, pruning, label format, evolution settings) through pydantic's JSON Schema of those
dataclasses, the keys only a file has (``callable``, ``scheduler_config``, ``function_resource``), search spaces as
YAML writes them (core/sweep/parts/space_yaml.py), and the search types and backends registered now. The schema says
what the file may hold; the spec's own checks (``gpusched sweep preview``) still say what is wrong with a value,
naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from airflow_provider_gpusched.core.backends import backend_names
from airflow_provider_gpusched.core.deprecation import moved_names
from airflow_provider_gpusched.core.sweep.definition.files import FILE_ONLY_KEYS
from airflow_provider_gpusched.core.sweep.definition.search_kind import SEARCH_KINDS, loaded_kind
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.parts.space_yaml import SPACE_MAKERS
from airflow_provider_gpusched.core.sweep.pruning_rules.base import pruner_names, rule_schema_defs

SCHEMA_ID = "https://github.com/airflow-provider-gpusched/airflow-provider-gpusched/sweep.schema.json"
#: the evolution settings record the old spec_schema module (now an alias of this one) imported: still answered
__getattr__ = moved_names(
    __name__, {"EvolutionSettings": "airflow_provider_gpusched.core.sweep.searches.evolution:EvolutionSettings"}
)
TARGET = {"type": "string", "pattern": r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$", "description": "package.module:name"}


def _dimension() -> dict[str, Any]:
    """One parameter's space: a list of values, a one-key maker (``{loguniform: [1e-5, 1e-1]}``), with an optional
    ``when``, or a nested mapping of parameters."""
    makers = [
        {
            "type": "object",
            "properties": {
                name: {"type": "array", "minItems": arity, "maxItems": arity}
                if name != "choice"
                else {"type": "array", "minItems": 1},
                "when": {"type": "object", "description": "the other parameters' values this one applies under"},
            },
            "required": [name],
            "additionalProperties": False,
        }
        for name, arity in sorted(SPACE_MAKERS.items())
    ]
    values = {
        "type": "object",
        "properties": {"values": {"type": "array", "minItems": 1}, "when": {"type": "object"}},
        "required": ["values"],
        "additionalProperties": False,
    }
    # a nested mapping of parameters; one that has a maker's key is that maker, checked as such above
    nested = {
        "type": "object",
        "additionalProperties": {"$ref": "#/$defs/dimension"},
        "not": {"anyOf": [{"required": [name]} for name in (*sorted(SPACE_MAKERS), "values")]},
    }
    return {
        "anyOf": [{"type": "array", "minItems": 1}, *makers, values, nested, {"not": {"type": ["object", "array"]}}]
    }


def _adapted(hint: Any) -> dict[str, Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(hint).json_schema(ref_template="#/$defs/{model}")


def sweep_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a sweep spec file."""
    hints = typing.get_type_hints(SweepSpec, include_extras=True)  # with their bounds and descriptions
    overrides: dict[str, dict[str, Any]] = {
        "search": {"enum": sorted(SEARCH_KINDS)},
        "objective": {
            "anyOf": [
                {"type": "string", "description": "'maximize accuracy' or 'minimize loss'"},
                {
                    "type": "object",
                    "properties": {
                        "metric": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                        "mode": {
                            "anyOf": [
                                {"enum": ["maximize", "minimize"]},
                                {"type": "array", "items": {"enum": ["maximize", "minimize"]}},
                            ]
                        },
                        "weights": {"type": "array", "items": {"type": "number"}},
                    },
                    "required": ["metric"],
                    "additionalProperties": False,
                },
            ]
        },
        "space": {"type": "object", "additionalProperties": {"$ref": "#/$defs/dimension"}},
        "test_config": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "object", "additionalProperties": {"$ref": "#/$defs/dimension"}},
        },
        "required_env": TARGET,
        "pruning": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/PruningRule"}]},
        "resources": {"$ref": "#/$defs/TrialResources"},
        "command": {"type": "array", "minItems": 1, "items": {"type": ["string", "number"]}},
    }
    properties: dict[str, Any] = {}
    resources = {k: v for k, v in _adapted(hints["resources"]).items() if k != "title"}
    defs: dict[str, Any] = {"dimension": _dimension(), **resources.pop("$defs", {}), "TrialResources": resources}
    for name in SEARCH_KINDS:  # each search type's own settings, as its kind describes them (one not loading: none)
        kind = loaded_kind(name)
        key = kind.settings_key if kind is not None else None
        own = kind.settings_schema() if kind is not None and key else None
        if key and own is not None:
            defs.update(own.pop("$defs", {}))
            overrides[key] = own
    for field in dataclasses.fields(SweepSpec):
        if field.name in ("where", "python_callable"):
            continue
        if field.name in overrides:
            schema = overrides[field.name]
            if field.name == "pruning":
                defs.update(rule_schema_defs())  # the shared settings and each rule's own
        else:
            schema = _adapted(hints[field.name])
            defs.update(schema.pop("$defs", {}))
        properties[field.name] = {k: v for k, v in schema.items() if k != "title"}
    # the backends registered now (an entry point's too); a key the resources do not have is refused
    resources["properties"]["backend"] = {"anyOf": [{"enum": sorted(backend_names())}, {"type": "null"}]}
    resources["additionalProperties"] = False
    for name in ("PruningRule", "LabelFormat"):
        if name in defs:
            defs[name]["additionalProperties"] = False
    # the pruning rules registered now (an entry point's too)
    defs["PruningRule"]["properties"]["rule"]["enum"] = pruner_names()
    for key, own in overrides.items():  # an installed kind's key, written at the top level of a file
        if key not in properties:
            properties[key] = {k: v for k, v in own.items() if k != "title"}
    properties["callable"] = {**TARGET, "description": "the trial function (instead of command)"}
    properties["scheduler_config"] = {"type": "object", "description": "GPU Task Scheduler's block"}
    properties["function_resource"] = {"$ref": "#/$defs/TrialResources", "description": "pavi's name for resources"}
    assert set(FILE_ONLY_KEYS) <= set(properties)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "gpusched sweep spec",
        "description": "A sweep of airflow-provider-gpusched (docs/sweeps.md)",
        "type": "object",
        "properties": properties,
        "required": ["name"],
        "additionalProperties": False,
        "$defs": defs,
    }

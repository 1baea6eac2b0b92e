"""A sweep spec as people write it: a YAML file (read safely, a FIFO or directory refused by name, the file's
folder for its relative paths) or a mapping, with the YAML-only spellings turned into the spec's arguments: search
spaces as one-key mappings, ``callable: package.module:function``, and the seed tools' blocks
(``scheduler_config``, ``function_resource``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Set
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError, UnknownKeyError
from airflow_provider_gpusched.core.import_target import import_callable
from airflow_provider_gpusched.core.sweep.parts.config_template import NotRegular, check_regular
from airflow_provider_gpusched.core.sweep.parts.seed_formats import scheduler_config
from airflow_provider_gpusched.core.sweep.parts.space_yaml import parse_dim

#: keys a spec file may have besides the spec's own fields
FILE_ONLY_KEYS = ("callable", "scheduler_config", "function_resource")


def spec_arguments(data: Any, where: str, fields: Set[str]) -> dict[str, Any]:
    """``SweepSpec`` arguments from a mapping whose keys are the spec's ``fields`` (and :data:`FILE_ONLY_KEYS`)."""
    if not isinstance(data, Mapping):
        raise InvalidArgumentError(where, data, "a mapping with name, command and a search space")
    allowed = set(fields) | set(FILE_ONLY_KEYS)
    if "name" not in data:
        raise InvalidArgumentError(f"{where}: name", None, "a sweep name (the key is missing)")
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise UnknownKeyError(f"{where}: {unknown[0]}", unknown[0], allowed)
    kwargs = dict(data)
    if "function_resource" in kwargs:  # pavi's name for the resources of each call
        if "resources" in kwargs:
            raise InvalidArgumentError(
                f"{where}: function_resource", kwargs["function_resource"], "one place: resources is given too"
            )
        kwargs["resources"] = kwargs.pop("function_resource")
    if "scheduler_config" in kwargs:
        kwargs = scheduler_config(kwargs, where)
    if "callable" in kwargs:
        kwargs["python_callable"] = import_callable(kwargs.pop("callable"), f"{where}: callable")
    if "test_config" in kwargs and isinstance(kwargs["test_config"], list):
        kwargs["test_config"] = [
            {k: parse_dim(v, f"{where}: test_config[{i}].{k}") for k, v in block.items()}
            if isinstance(block, Mapping)
            else block
            for i, block in enumerate(kwargs["test_config"])
        ]
    if "space" in kwargs and isinstance(kwargs["space"], Mapping):
        kwargs["space"] = {k: parse_dim(v, f"{where}: space.{k}") for k, v in kwargs["space"].items()}
    if isinstance(kwargs.get("evolution"), Mapping) and isinstance(kwargs["evolution"].get("measure"), str):
        kwargs["evolution"] = {
            **kwargs["evolution"],
            "measure": import_callable(kwargs["evolution"]["measure"], f"{where}: evolution.measure"),
        }
    return kwargs


def read_spec_file(path: str) -> Any:
    """The YAML document of ``path``, with its relative paths anchored at the file's folder (``base_dir``, and the
    config template's path)."""
    import yaml

    from airflow_provider_gpusched.core.yaml_loader import safe_load

    try:
        check_regular(path)
        with open(path) as fh:
            data = safe_load(fh)
    except FileNotFoundError:
        raise InvalidArgumentError("sweep spec", path, "an existing YAML file") from None
    except NotRegular as exc:
        raise InvalidArgumentError("sweep spec", path, f"a YAML file, not {exc}") from None
    except IsADirectoryError:
        raise InvalidArgumentError("sweep spec", path, "a YAML file, not a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError("sweep spec", path, f"a readable YAML file ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidArgumentError(f"{path}:{at}", getattr(exc, "problem", str(exc)), "valid YAML") from None
    if isinstance(data, Mapping) and isinstance(data.get("config_template"), str):
        # a relative template path is relative to the spec file, wherever the command is run from
        data = {
            **data,
            "config_template": os.path.join(
                os.path.dirname(os.path.abspath(path)), os.path.expanduser(data["config_template"])
            ),
        }
    if isinstance(data, Mapping):  # relative paths in the command: relative to the spec file
        data = {"base_dir": os.path.dirname(os.path.abspath(path)), **data}
    return data

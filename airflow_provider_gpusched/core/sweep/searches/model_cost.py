"""What a model costs, measured from the model itself: its parameters and the FLOPs of one forward pass.

This is the built-in evaluator of a NAS search's constraints (pavi's ``evaluator=dict(type='NaiveEvaluator',
units='M', default_shape=(1, 3, 224, 224))`` with ``constraints=dict(flops=600)``): the search builds each
candidate's model with the user's ``build`` function, runs one forward pass on zeros of ``input_shape`` under
PyTorch's own FLOP counter (``torch.utils.flop_counter.FlopCounterMode``), and proposes only candidates within
the limits::

    EvolutionSettings(constraints={"flops": 1.5, "params": 0.02},          # in millions (units="M")
                      evaluator=ModelCost("my_models:build", input_shape=(1, 1, 8, 8)))

FLOPs are counted as PyTorch counts them: a multiply-add is 2 FLOPs (tools that count MACs report half).
Operations PyTorch's counter does not know (element-wise activations, pooling) count 0. PyTorch is imported
on first use only: the rest of the sweep core does not need it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError

UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9}


def model_cost(model: Any, input_shape: Sequence[int]) -> dict[str, int]:
    """``{"params": ..., "flops": ...}`` of a ``torch.nn.Module``: its parameter count, and the FLOPs of one
    forward pass (in eval mode, without gradients) on zeros of ``input_shape``, batch dimension included."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    params = sum(p.numel() for p in model.parameters())
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(torch.zeros(*input_shape, device=device))
    finally:
        model.train(was_training)
    return {"params": int(params), "flops": int(counter.get_total_flops())}


@dataclass
class ModelCost:
    """A search's ``measure``: ``params -> {"flops": ..., "params": ...}`` in ``units`` (``""``, ``K``, ``M``,
    ``G``), from the model that ``build(params)`` returns. ``build`` may be ``"package.module:function"`` (as in
    a YAML spec). Each candidate is measured once."""

    build: Callable[[Mapping[str, Any]], Any] | str
    input_shape: Sequence[int]
    units: str = "M"
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def check(self, where: str) -> None:
        if not callable(self.build) and not (isinstance(self.build, str) and ":" in self.build):
            raise InvalidArgumentError(
                f"{where}.build", self.build, "a function params -> torch.nn.Module, or 'package.module:function'"
            )
        shape = self.input_shape
        if (
            isinstance(shape, (str, bytes))
            or not isinstance(shape, Sequence)
            or not shape
            or any(not is_int(n) or n < 1 for n in shape)
        ):
            raise InvalidArgumentError(
                f"{where}.input_shape",
                shape,
                "the shape of one model input, batch dimension first, e.g. [1, 3, 224, 224]",
            )
        if self.units not in UNITS:
            raise InvalidArgumentError(f"{where}.units", self.units, f"one of {', '.join(map(repr, UNITS))}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str) -> ModelCost:
        """From a spec's ``evaluator:`` block: ``{build, input_shape, units}`` (pavi's ``default_shape`` is taken
        for ``input_shape``; its ``type`` may only be ``NaiveEvaluator``)."""
        data = dict(data)
        kind = data.pop("type", "NaiveEvaluator")
        if kind not in ("NaiveEvaluator", "ModelCost"):
            raise InvalidArgumentError(f"{where}.type", kind, "NaiveEvaluator (FLOPs and parameters of the model)")
        if "default_shape" in data and "input_shape" not in data:
            data["input_shape"] = data.pop("default_shape")
        unknown = sorted(set(data) - {"build", "input_shape", "units"})
        if unknown:
            raise InvalidArgumentError(
                f"{where}.{unknown[0]}", data[unknown[0]], "one of build, input_shape (or default_shape), units"
            )
        for name in ("build", "input_shape"):
            if name not in data:
                raise InvalidArgumentError(
                    f"{where}.{name}", None, "a value (the evaluator builds and measures each candidate's model)"
                )
        cost = cls(
            build=data["build"],
            input_shape=tuple(data["input_shape"]) if isinstance(data["input_shape"], list) else data["input_shape"],
            units=data.get("units", "M"),
        )
        cost.check(where)
        return cost

    def builder(self) -> Callable[[Mapping[str, Any]], Any]:
        if callable(self.build):
            return self.build
        from airflow_provider_gpusched.core.import_target import import_callable

        return import_callable(self.build, "evaluator.build")

    def __call__(self, params: Mapping[str, Any]) -> dict[str, float]:
        key = json.dumps(params, sort_keys=True, default=str)
        if key not in self._cache:
            try:
                model = self.builder()(params)
            except Exception as exc:
                raise GpuschedError(f"evaluator: build({dict(params)}) failed: {type(exc).__name__}: {exc}") from exc
            scale = UNITS[self.units]
            self._cache[key] = {k: v / scale for k, v in model_cost(model, self.input_shape).items()}
        return dict(self._cache[key])

"""Reading YAML, bounded: libyaml's C loader where PyYAML was built with it (about 8x faster on the partitioner's
inputs), the pure-Python safe loader otherwise. Both build the same plain data and raise ``yaml.YAMLError``
subclasses with line and column marks.

Every document is bounded before it is built into Python data: its size (:data:`MAX_BYTES`), its nesting depth
(:data:`MAX_DEPTH`) and the number of values it holds once its aliases are expanded (:data:`MAX_VALUES`). A 1 KB
"billion laughs" of nested aliases is refused in milliseconds, naming the limit, instead of taking gigabytes when
something walks it (an error message, a deep copy, a comparison)."""

from __future__ import annotations

from typing import IO, Any

import yaml

#: a YAML file this package reads is at most this big (a sweep spec of thousands of trials is a few hundred KB)
MAX_BYTES = 8 << 20
#: values (scalars, lists, mappings) a document holds with every alias expanded
MAX_VALUES = 1_000_000
#: lists and mappings inside each other at most
MAX_DEPTH = 100


class YAMLLimitError(yaml.YAMLError):
    """A YAML document over one of the loader's bounds; ``problem`` says which."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = None


def safe_load(
    stream: str | bytes | IO[str] | IO[bytes],
    *,
    max_bytes: int = MAX_BYTES,
    max_values: int = MAX_VALUES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """The plain data of one YAML document; :class:`YAMLLimitError` when it is over a bound."""
    text = stream if isinstance(stream, (str, bytes)) else stream.read(max_bytes + 1)
    if len(text) > max_bytes:
        raise YAMLLimitError(f"the document is over {max_bytes:,} bytes: not read (is this the file you meant?)")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YAMLLimitError(f"the document is nested too deep (more than {max_depth} levels)") from None
        if node is None:
            return None
        if ("&" not in text) if isinstance(text, str) else (b"&" not in text):
            _check_tree(node, max_values, max_depth)  # no anchor, so no alias: every node is met once
        else:
            _check_size(node, max_values, max_depth)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _too_many(max_values: int) -> YAMLLimitError:
    return YAMLLimitError(
        f"the document holds more than {max_values:,} values once its aliases are expanded (an alias bomb?)"
    )


def _too_deep(max_depth: int) -> YAMLLimitError:
    return YAMLLimitError(f"the document is nested more than {max_depth} levels deep")


def _check_tree(root: Any, max_values: int, max_depth: int) -> None:
    """:func:`_check_size` for a document without anchors, whose nodes form a tree: a count and the deepest
    level, without the memo (a third of the cost on the partitioner's inputs)."""
    count = 0
    stack = [(root, 0)]
    mapping, sequence = yaml.MappingNode, yaml.SequenceNode
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > max_values:
            raise _too_many(max_values)
        if depth > max_depth:
            raise _too_deep(max_depth)
        if isinstance(node, mapping):
            for key, value in node.value:
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        elif isinstance(node, sequence):
            stack.extend((child, depth + 1) for child in node.value)


def _check_size(root: Any, max_values: int, max_depth: int) -> None:
    """Count the values under ``root`` as if every alias were expanded (each node's count memoised, so a graph of
    shared nodes costs its own size, not its expansion), and its depth; without recursion."""
    counts: dict[int, int] = {}
    depths: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in counts:
            continue
        children = _children(node)
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in counts)
            if len(stack) > 10 * max_values:
                raise YAMLLimitError(f"the document holds more than {max_values:,} values")
            continue
        if any(id(child) not in counts for child in children):
            # a cycle (a recursive alias): safe_load's plain data cannot hold one
            raise YAMLLimitError("the document refers to itself (a recursive alias)")
        counts[key] = 1 + sum(counts[id(child)] for child in children)
        depths[key] = 1 + max((depths[id(child)] for child in children), default=0) if children else 0
        if counts[key] > max_values:
            raise _too_many(max_values)
        if depths[key] > max_depth:
            raise _too_deep(max_depth)


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def names_a_file(value: str) -> bool:
    """Whether a setting that takes "a YAML/JSON file path or inline YAML/JSON text" names a file: not ``{...}``, one
    line, no ``key:`` before its first ``/``."""
    value = value.strip()
    return bool(value) and not (value.startswith("{") or "\n" in value or ":" in value.split("/")[0])


def load_setting(value: str, option: str, what: str, error: type[Exception]) -> tuple[Any, str]:
    """``(data, source)`` of a setting that is a YAML/JSON file path or inline YAML/JSON text (``option`` names it,
    ``[gpusched] quotas``); ``error`` (naming the file, or the option, and what is wrong) for a file that is not
    there or text that is not YAML/JSON. ``what`` names the file in the first case ("quota file")."""
    import os

    value, source = value.strip(), option
    if names_a_file(value):
        path = os.path.expanduser(value)
        if not os.path.isfile(path):
            raise error(f"{path}: {what} not found")
        with open(path) as fh:
            value, source = fh.read(MAX_BYTES + 1), path
    try:
        return safe_load(value), source
    except Exception as exc:
        raise error(f"{source}: not valid YAML/JSON ({exc})".replace("\n", " ")) from exc

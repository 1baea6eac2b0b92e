"""DI-toolkit's config files: a template with ``{{ param }}`` placeholders, rendered into each trial's folder, each
value written as the file's kind (Python, shell, YAML, JSON, text) quotes it."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep.parts.command import value_text


class NotRegular(Exception):
    """A path that is not a regular file (what it is: the message)."""


def check_regular(path: str) -> None:
    """Raise :class:`NotRegular` for a FIFO, socket or device (reading one could block forever); a directory is
    left to ``open`` (IsADirectoryError)."""
    import stat

    mode = os.stat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise NotRegular("a FIFO" if stat.S_ISFIFO(mode) else "a special file")


_TEMPLATE_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\}\}")


def _placeholder_at(text: str, where: int) -> str:
    """The ``{{ name }}`` placeholder that starts at ``where`` (found there before), for an error message."""
    match = _TEMPLATE_PLACEHOLDER.match(text, where)
    return match.group(0) if match else text[where : where + 40]


MAX_CONFIG_TEMPLATE = 1 << 20


#: how a value is written into each kind of config template (by file extension): a literal of the file's language,
#: so that a value can never become code or syntax. Other extensions take the value as text, refused when it holds
#: a newline or another control character (it could add a key or a command).
TEMPLATE_KINDS = {
    ".py": "python",
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "yaml",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
}


class ConfigTemplate:
    """A config file with ``{{ param }}`` placeholders (dotted names allowed), rendered per trial. Values are
    written as literals of the file's language: Python literals in ``.py`` files; JSON in ``.json``, ``.yaml``,
    ``.yml`` and ``.toml`` (a JSON scalar or list is valid there); shell words quoted with ``shlex.quote`` in
    ``.sh``; plain text elsewhere, without newlines or control characters. A placeholder inside quotes
    (``lr = "{{ lr }}"``) is refused: the literal brings its own quotes, and inside a string a value could
    close it and go on as code."""

    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text
        self.names = sorted(set(_TEMPLATE_PLACEHOLDER.findall(text)))
        self.kind = TEMPLATE_KINDS.get(os.path.splitext(name)[1].lower(), "text")
        quoted = _quoted_placeholder(text, self.kind)
        if quoted:
            raise InvalidArgumentError(
                "config_template",
                f"{name}: {quoted}",
                "a placeholder outside quotes: it is written as a quoted literal of the "
                "file's language (remove the quotes around it)",
            )
        #: placeholders (by offset) that stand in a shell comment: their value may hold no newline
        self.in_comment: set[int] = set()
        if self.kind == "shell":
            where, why, self.in_comment = _shell_placeholder_contexts(text)
            if why:
                line = text.count("\n", 0, where) + 1
                raise InvalidArgumentError(
                    "config_template",
                    f"{name}, line {line}: {_placeholder_at(text, where)}",
                    f"a placeholder where its quoted value stays one shell word, not {why} (there a value can "
                    f"become code). Write it outside (e.g. printf '%s\\n' {{{{ name }}}} >> file) or use a "
                    f".yaml/.json/.cfg template",
                )

    @classmethod
    def read(cls, path: Any, where: str) -> ConfigTemplate:
        if not isinstance(path, str) or not path:
            raise InvalidArgumentError(where, path, "the path of a config template file")
        try:
            check_regular(path)
            if os.path.getsize(path) > MAX_CONFIG_TEMPLATE:
                raise InvalidArgumentError(where, path, "a config template of at most 1 MiB")
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            raise InvalidArgumentError(where, path, "an existing config template file") from None
        except NotRegular as exc:
            raise InvalidArgumentError(where, path, f"a config template file, not {exc}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(where, path, f"a readable UTF-8 text file ({exc})") from None
        return cls(os.path.basename(path), text)

    def render(self, values: Mapping[str, Any]) -> str:
        def literal(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values:
                raise InvalidArgumentError(
                    "config_template",
                    f"{self.name}: {{{{ {name} }}}}",
                    f"a parameter this trial has (it has {sorted(values)}; a conditional one?)",
                )
            value = values[name]
            if self.kind == "python":
                return repr(value)
            if self.kind in ("json", "yaml"):
                return json.dumps(value)
            if self.kind == "shell":
                import shlex

                text = value_text(value)
                if match.start() in self.in_comment and _CONTROL.search(text):
                    raise InvalidArgumentError(
                        "config_template",
                        f"{self.name}: {{{{ {name} }}}} = {text!r}",
                        "a value without newlines or control characters in a shell comment "
                        "(a newline would end the comment and start a command)",
                    )
                return shlex.quote(text)
            text = value_text(value)
            if _CONTROL.search(text):
                raise InvalidArgumentError(
                    "config_template",
                    f"{self.name}: {{{{ {name} }}}} = {text!r}",
                    "a value without newlines or control characters in a plain-text "
                    "template (it could add a line of its own)",
                )
            return text

        return _TEMPLATE_PLACEHOLDER.sub(literal, self.text)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^'\n]*)'|\"([^\"\n]*)\"|\\?([^\s;&|<>()]+))")


def _shell_placeholder_contexts(text: str) -> tuple[int, str, set[int]]:
    """Where a quoted shell word would not stay a word: ``(offset, why, comments)``, the first placeholder inside a
    heredoc (quoted or not: ``$( )`` runs in one, and a value line equal to its delimiter ends it), inside
    backticks (backslashes there are read before the quotes), or as a heredoc's delimiter; ``why`` is "" when
    there is none. ``comments``: the offsets of placeholders in ``#`` comments (their values may not hold a
    newline). Quotes are tracked so that ``#``, ``<<`` and backticks inside them are text."""
    comments: set[int] = set()
    quote, backtick, i = "", False, 0
    pending: list[tuple[str, bool, int]] = []  # heredocs opened on this line: (delimiter, strip tabs, line start)
    while i < len(text):
        c = text[i]
        match = _TEMPLATE_PLACEHOLDER.match(text, i)
        if match:
            if backtick:
                return i, "inside backticks (`...`)", comments
            i = match.end()
            continue
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
            i += 1
            continue
        if c == "\n":
            i += 1
            for delimiter, strip, opened in pending:  # the heredocs' bodies follow this line, one after another
                while i < len(text):
                    end = text.find("\n", i)
                    end = len(text) if end < 0 else end
                    line = text[i:end]
                    body = _TEMPLATE_PLACEHOLDER.search(line)
                    if (line.lstrip("\t") if strip else line) == delimiter:
                        i = end + 1
                        break
                    if body:
                        return i + body.start(), f"inside a heredoc (<<{delimiter}, opened on line {opened})", comments
                    i = end + 1
            pending = []
            continue
        if c == "\\":
            i += 2
            continue
        if c == "#" and (i == 0 or text[i - 1] in " \t\n;&|("):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            comments.update(i + m.start() for m in _TEMPLATE_PLACEHOLDER.finditer(text[i:end]))
            i = end
            continue
        if c == "`":
            backtick = not backtick
        elif c in ("'", '"'):
            quote = c
        elif text.startswith("<<", i) and not text.startswith("<<<", i):
            here = _HEREDOC.match(text, i)
            named = _TEMPLATE_PLACEHOLDER.match(text, len(text) - len(text[i + 2 :].lstrip("-'\" \t\\")))
            delimiter = next((g for g in here.group(2, 3, 4) if g is not None), "") if here else ""
            if named or _TEMPLATE_PLACEHOLDER.search(delimiter):
                found = named or _TEMPLATE_PLACEHOLDER.search(text, i)
                return (found.start() if found else i), "as a heredoc's delimiter", comments
            if here is None:  # `<<` and no word: not a heredoc the shell would run either
                i += 2
                continue
            pending.append((delimiter, here.group(1) == "-", text.count("\n", 0, i) + 1))
            i = here.end()
            continue
        i += 1
    return 0, "", comments


def _quoted_placeholder(text: str, kind: str) -> str:
    """The first placeholder that stands inside a string literal of the template's language, or ''."""
    if kind == "text" or not _TEMPLATE_PLACEHOLDER.search(text):
        return ""
    if kind == "python":
        import io
        import tokenize

        marked = _TEMPLATE_PLACEHOLDER.sub(lambda m: f"__gpusched_placeholder_{m.start()}__", text)
        try:
            for token in tokenize.generate_tokens(io.StringIO(marked).readline):
                if (
                    token.type != tokenize.COMMENT
                    and token.type not in (tokenize.NAME, tokenize.OP)
                    and "__gpusched_placeholder_" in token.string
                ):
                    start = int(token.string.split("__gpusched_placeholder_", 1)[1].split("__", 1)[0])
                    return _placeholder_at(text, start)
        except (tokenize.TokenError, SyntaxError, IndentationError):
            return ""  # not Python we can read: rendered literals still cannot leave their own quotes
        return ""
    # JSON, YAML, TOML, shell: walk the text keeping track of quotes and # comments. Outside the shell a quote
    # opens a string only where a value starts (an apostrophe inside a word, "it's", is text)
    quote, i = "", 0
    while i < len(text):
        c = text[i]
        if not quote and c == "#" and kind != "json" and (i == 0 or text[i - 1] in " \t\n"):
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        match = _TEMPLATE_PLACEHOLDER.match(text, i)
        if match:
            if quote:
                return match.group(0)
            i = match.end()
            continue
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in ("'", '"') and (kind == "shell" or i == 0 or text[i - 1] in " \t\n:[{,=("):
            quote = c
        i += 1
    return ""

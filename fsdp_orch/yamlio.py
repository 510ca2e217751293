"""Reading YAML documents with precise errors and a map from field paths to line numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fsdp_orch.errors import InputError

try:
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _Loader = yaml.SafeLoader

Path_ = tuple[str | int, ...]


@dataclass
class YamlDoc:
    """A loaded mapping document plus where each field was written."""

    file: str
    data: dict[str, Any]
    lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int | None:
        """Line of ``path`` or of its nearest written ancestor."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None


def read_text(path: Path, what: str = "file") -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} not found", file=str(path)) from None
    except IsADirectoryError:
        raise InputError(f"expected a YAML {what}, got a directory", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", file=str(path)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                         file=str(path), line=line) from None


def load_mapping(text: str, file: str) -> YamlDoc:
    """Parse ``text`` as one YAML mapping; any problem becomes an InputError naming ``file``."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"YAML syntax error: {problem}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"YAML error: {exc}", file=file) from None
    if node is None:
        raise InputError("empty document; expected a mapping of fields", file=file)
    if not isinstance(node, yaml.MappingNode):
        kind = {"ScalarNode": "a single value", "SequenceNode": "a list"}.get(type(node).__name__, "not a mapping")
        raise InputError(f"expected a mapping of fields at the top level, got {kind}",
                         file=file, line=node.start_mark.line + 1)
    lines: dict[Path_, int] = {}
    _index_lines(node, (), lines, file)
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - safe loader
    except yaml.YAMLError as exc:  # pragma: no cover - compose already validated
        raise InputError(f"YAML error: {exc}", file=file) from None
    if not isinstance(data, dict):  # pragma: no cover - compose already validated
        raise InputError("expected a mapping of fields at the top level", file=file)
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise InputError(f"field names must be strings, got {bad[0]!r}", file=file)
    return YamlDoc(file=file, data=data, lines=lines)


def load_file(path: Path, what: str = "file") -> YamlDoc:
    return load_mapping(read_text(path, what), str(path))


def _index_lines(node: yaml.Node, path: Path_, out: dict[Path_, int], file: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise InputError(f"duplicate key {key!r}", file=file,
                                 field=".".join(str(p) for p in (*path, key)),
                                 line=key_node.start_mark.line + 1)
            seen.add(key)
            out[(*path, key)] = key_node.start_mark.line + 1
            _index_lines(value_node, (*path, key), out, file)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*path, i)] = item.start_mark.line + 1
            _index_lines(item, (*path, i), out, file)

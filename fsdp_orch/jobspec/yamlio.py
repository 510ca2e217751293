"""Reading YAML documents with precise errors and a map from field paths to line numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fsdp_orch.vocab.errors import InputError

try:
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _Loader = yaml.SafeLoader

Path_ = tuple[str | int, ...]
# No real job or profile comes near these; beyond them a document is a mistake or an attack.
MAX_DEPTH = 100
MAX_NODES = 100_000
MAX_CHARS = 1 << 20  # refused before parsing: 200,000 list items took 18 s to refuse after it


@dataclass
class YamlDoc:
    """A loaded mapping document plus where each field was written."""

    file: str
    data: dict[str, Any]
    lines: dict[Path_, int] = field(default_factory=dict)
    # The text of plain scalars that YAML turned into numbers or booleans (``3.10`` -> 3.1),
    # so fields that are strings to the program (args, env values) can keep what was written.
    texts: dict[Path_, str] = field(default_factory=dict)

    def data_with_text(self, fields: tuple[str, ...]) -> dict[str, Any]:
        """A copy of ``data`` where the items of ``fields`` (lists or mappings of strings) keep
        the text written for unquoted numbers and booleans: ``[--lr, 1.10]`` -> ``"1.10"``."""
        data = dict(self.data)
        for path, text in self.texts.items():
            if len(path) != 2 or path[0] not in fields:
                continue
            container = data.get(path[0])
            if (isinstance(container, list) and isinstance(path[1], int)
                    and path[1] < len(container)):
                data[path[0]] = container = list(container)
            elif isinstance(container, dict) and path[1] in container:
                data[path[0]] = container = dict(container)
            else:
                continue
            container[path[1]] = text  # type: ignore[index]
        return data

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
    if len(text) > MAX_CHARS:
        raise InputError(f"{len(text):,} characters; expected a job or profile of at most "
                         f"{MAX_CHARS >> 20} MiB", file=file)
    try:
        node = yaml.compose(text, Loader=_Loader)
    except UnicodeError:  # lone surrogates in a str handed to us by a caller
        raise InputError("not valid Unicode text", file=file) from None
    except RecursionError:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", file=file) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"YAML syntax error: {problem}", file=file, line=line) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, e.g. a control code
        line = text[: exc.position].count("\n") + 1 if isinstance(exc.position, int) else None
        raise InputError(f"YAML syntax error: character {exc.character!r} is not allowed "
                         f"({exc.reason})", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"YAML error: {_one_line(exc)}", file=file) from None
    if node is None:
        raise InputError("empty document; expected a mapping of fields", file=file)
    if not isinstance(node, yaml.MappingNode):
        kind = {"ScalarNode": "a single value",
                "SequenceNode": "a list"}.get(type(node).__name__, "not a mapping")
        raise InputError(f"expected a mapping of fields at the top level, got {kind}",
                         file=file, line=node.start_mark.line + 1)
    lines: dict[Path_, int] = {}
    texts: dict[Path_, str] = {}
    _index_lines(node, lines, texts, file)
    _check_expanded(node, file)
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - safe loader
    except yaml.MarkedYAMLError as exc:  # e.g. an unhashable key, a bad !!binary or merge
        mark = exc.problem_mark or exc.context_mark
        raise InputError(f"YAML error: {exc.problem or exc.context or 'invalid YAML'}", file=file,
                         line=mark.line + 1 if mark else None) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        # the constructor's own checks (a timestamp like 2024-13-45) are not YAMLErrors
        raise InputError(f"YAML error: {_one_line(exc)}", file=file) from None
    if not isinstance(data, dict):  # pragma: no cover - compose already validated
        raise InputError("expected a mapping of fields at the top level", file=file)
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise InputError(f"field names must be strings, got {bad[0]!r}", file=file)
    return YamlDoc(file=file, data=data, lines=lines, texts=texts)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def load_file(path: Path, what: str = "file") -> YamlDoc:
    return load_mapping(read_text(path, what), str(path))


_STRINGLIKE_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"}


def _index_lines(root: yaml.Node, lines: dict[Path_, int], texts: dict[Path_, str],
                 file: str) -> None:
    """Record the line of every field and list item; reject what cannot be a job document.

    Iterative, and each node is entered once: an alias shares its anchor's lines, so neither
    ``&a [*a]`` (recursive) nor a billion-laughs document can exhaust the stack or the clock.
    """
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, Path_]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels", file=file,
                             line=node.start_mark.line + 1)
        if id(node) in seen_nodes:
            if any(node is ancestor for ancestor in _ancestors(root, path)):
                raise InputError("an alias refers to a mapping or list that contains it",
                                 file=file, field=dotted(path) or None,
                                 line=node.start_mark.line + 1)
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise InputError("field names must be strings, got a "
                                     + ("list" if isinstance(key_node, yaml.SequenceNode)
                                        else "mapping"),
                                     file=file, field=dotted(path) or None,
                                     line=key_node.start_mark.line + 1)
                key = key_node.value
                if key in seen:
                    raise InputError(f"duplicate key {key!r}", file=file,
                                     field=dotted((*path, key)),
                                     line=key_node.start_mark.line + 1)
                seen.add(key)
                lines[path + (key,)] = key_node.start_mark.line + 1
                stack.append((value_node, path + (key,)))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[path + (i,)] = item.start_mark.line + 1
                stack.append((item, path + (i,)))
        elif (isinstance(node, yaml.ScalarNode) and node.tag in _STRINGLIKE_TAGS
              and not node.style):
            texts[path] = node.value


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expanded(root: yaml.Node, file: str) -> None:
    """Size and depth of the document with every alias expanded, computed once per node."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in size:
            continue
        kids = _children(node)
        if not children_done:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in size)
            continue
        size[id(node)] = 1 + sum(size[id(k)] for k in kids)
        depth[id(node)] = 1 + max((depth[id(k)] for k in kids), default=0)
    if size[id(root)] > MAX_NODES:
        expanded = " once aliases are expanded" if len(size) < size[id(root)] else ""
        raise InputError(f"more than {MAX_NODES} values{expanded}", file=file)
    if depth[id(root)] > MAX_DEPTH:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels once aliases are expanded",
                         file=file)


def _ancestors(root: yaml.Node, path: Path_) -> list[yaml.Node]:
    """The nodes from ``root`` down to (not including) the one at ``path``."""
    out: list[yaml.Node] = []
    node = root
    for part in path:
        out.append(node)
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), node)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part]
    return out


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")


def dotted(path: Path_) -> str:
    """``restart.backoff.max`` / ``args.0``; a key that is not a plain name shows quoted
    (``env.'a\\nb'``), so a message about it stays one line."""
    return ".".join(str(p) if isinstance(p, int) or _PLAIN_KEY.fullmatch(p) else repr(p)
                    for p in path)

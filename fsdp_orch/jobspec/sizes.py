"""Memory sizes as users write them: ``80GB``, ``24 GiB``, ``512MB`` or a bare number of bytes.
GPU vendors' ``80GB`` is 80 GiB of addressable memory as ``nvidia-smi`` counts it, so GB and GiB
are both taken as powers of 1024, as ``nvidia-smi`` and the cluster schedulers' GRES do."""

from __future__ import annotations

import math
import re

from fsdp_orch.vocab.errors import InputError

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
          "tib": 1 << 40}
MAX_BYTES = 1 << 50  # 1 PiB
_SIZE = re.compile(r"([0-9]{1,30}(?:\.[0-9]{1,30})?)([a-z]*)")  # ASCII digits, of a sane length


def parse_size(value: object) -> int:
    """Bytes. Raises ValueError with the accepted forms."""
    expected = "expected a memory size like 80GB, 24GiB or 512MB (from 1 byte to 1PiB)"
    if isinstance(value, bool):
        raise ValueError(f"{expected}; got {value!r}")
    if isinstance(value, int):
        if not 0 < value <= MAX_BYTES:
            raise ValueError(f"{expected}; got {_shown(value)}")
        return value
    if isinstance(value, float) and math.isfinite(value) and 1 <= value <= MAX_BYTES:
        return int(value)
    if isinstance(value, str):
        match = _SIZE.fullmatch(value.strip().lower().replace(" ", ""))
        if match and match.group(2) in _UNITS:
            size = float(match.group(1)) * _UNITS[match.group(2)]
            if 1 <= size <= MAX_BYTES:  # half a byte is no size, nor is more than a PiB a GPU
                return int(size)
    raise ValueError(f"{expected}; got {_shown(value)}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def size_argument(value: object, field: str) -> int:
    """A size handed over as an argument (``--gpu-memory 80GB``, ``gpu_memory="80GB"``): bytes;
    InputError naming ``field`` with the accepted forms."""
    try:
        return parse_size(value)
    except ValueError as exc:
        raise InputError(str(exc), field=field) from None


def format_gib(size: float) -> str:
    return f"{size / (1 << 30):.1f} GiB"

"""Each GPU's memory from a SLURM partition's GRES, for ``fsdp-orch fit``'s verdict where the
profile does not say its ``gpu_memory`` (pure: the text of ``sinfo -h -p PART -o %G`` in, the
memory and why out; ``SlurmKind.gpu_memory`` runs the command).

SLURM names a GPU type as its admins wrote it in gres.conf (``gpu:h100:8``, ``gpu:a100_80gb:4``)
or as NVML's autodetection gives it (``gpu:nvidia_a100-sxm4-80gb:4``,
``gpu:tesla_v100-sxm2-32gb:8``). A size in the name wins; else a family that comes in one size
only; a family that comes in several (A100: 40 or 80 GB) is no answer, and said so.
"""

from __future__ import annotations

import re

MIB = 1 << 20

# Each family's memory as nvidia-smi reports the card's total (MiB), by its size as marketed
# (GB); one entry: the family comes in that size only.
FAMILIES: dict[str, dict[int, int]] = {
    "h200": {141: 143771},
    "h100nvl": {94: 95830},
    "h100": {80: 81559, 94: 95830},
    "a100": {40: 40960, 80: 81920},
    "a40": {48: 46068},
    "a30": {24: 24576},
    "a10g": {24: 23028},
    "a10": {24: 23028},
    "l40s": {48: 46068},
    "l40": {48: 46068},
    "l4": {24: 23034},
    "v100": {16: 16160, 32: 32510},
    "t4": {16: 15360},
    "rtx_a6000": {48: 49140},
}
# The one size a family comes in when its name says none (H100 PCIe and SXM: 80 GB; the 94 GB NVL
# is named so).
ONE_SIZE = {"h100": 80}

_GPU = re.compile(r"(?:^|,)gpu:(?:([^:,(\s]+):)?(\d+)")
# a size in a type's name: "80gb", "_40g", "-32gb" (never the "10g" of "a10g")
_SIZE = re.compile(r"(?<![a-z0-9])(\d{2,3})g(?:i?b)?(?![a-z0-9])")
# the prefixes NVML's autodetected names carry
_VENDOR = re.compile(r"^((nvidia|tesla|geforce|quadro)[_-]+)+")


def sinfo_argv(partition: str | None) -> list[str]:
    """The partition's GRES, one line a group of alike nodes (all partitions' without one)."""
    return ["sinfo", "-h", *(["-p", partition] if partition else []), "-o", "%G"]


def gpu_types(sinfo_text: str) -> list[str | None]:
    """The GPU type of each GRES line that has GPUs (None: GPUs with no type), in order, each
    once; lines without GPUs (``(null)``) are left out."""
    found: list[str | None] = []
    for line in sinfo_text.splitlines():
        for match in _GPU.finditer(line.strip().lower()):
            kind = match.group(1)
            if kind not in found:
                found.append(kind)
    return found


def memory_of(gpu_type: str) -> tuple[int | None, str]:
    """Bytes of memory a GPU of SLURM's type ``gpu_type`` has, and how that was read (or why
    not)."""
    name = _VENDOR.sub("", gpu_type.lower()).replace("h100_nvl", "h100nvl").replace(
        "h100-nvl", "h100nvl")
    family = _family(name)
    sized = _SIZE.search(name)
    size = int(sized.group(1)) if sized else None
    if family is None:
        if size is not None:
            return size << 30, f"{size} GB, as its name says"
        return None, f"unknown GPU type {gpu_type!r}"
    sizes = FAMILIES[family]
    if size is None:
        size = ONE_SIZE.get(family) or (next(iter(sizes)) if len(sizes) == 1 else None)
        if size is None:
            made = " or ".join(f"{s} GB" for s in sizes)
            return None, (f"GPU type {gpu_type!r}: the {_shown(family)} comes in {made}, and "
                          "the name does not say which")
    if size not in sizes:
        return size << 30, f"{size} GB, as its name says"
    return sizes[size] * MIB, f"{_shown(family)} {size} GB ({sizes[size]} MiB)"


def _shown(family: str) -> str:
    return family.upper().replace("NVL", " NVL").replace("_", " ")


def _family(name: str) -> str | None:
    """The family ``name`` starts with, whole (``a10g`` is not an ``a10``, ``a100`` not an
    ``a10``)."""
    for family in sorted(FAMILIES, key=len, reverse=True):
        if name.startswith(family) and not name[len(family):len(family) + 1].isalnum():
            return family
    return None


def partition_gpu_memory(sinfo_text: str, partition: str | None) -> tuple[int | None, str]:
    """Each GPU's memory in the partition, from ``sinfo_argv``'s output, and a line saying where it
    came from (or why there is no answer: no GPUs, an unknown or ambiguous type, GPUs that
    differ)."""
    where = f"SLURM partition {partition}" if partition else "the SLURM cluster"
    types = gpu_types(sinfo_text)
    if not types:
        return None, f"{where} lists no GPUs in its GRES"
    if None in types:
        return None, f"{where}'s GRES names its GPUs with no type (gpu:N)"
    read = {kind: memory_of(kind) for kind in types if kind is not None}
    unknown = [why for memory, why in read.values() if memory is None]
    if unknown:
        return None, f"{where}'s GRES: {unknown[0]}"
    sizes = {memory for memory, _ in read.values()}
    if len(sizes) > 1:
        return None, (f"{where}'s GPUs differ ({', '.join(sorted(read))}): set gpu_memory in "
                      "the profile to the one the job runs on")
    [(kind, (memory, why))] = list(read.items())[:1]
    return memory, f"GPU memory from {where}'s GRES: gpu:{kind}, {why}"


__all__ = ["FAMILIES", "gpu_types", "memory_of", "partition_gpu_memory", "sinfo_argv"]

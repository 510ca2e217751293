"""Where the built-in templates and cluster profiles are: inside the wheel, or the source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def builtin_dir(name: str) -> Path:
    """``templates`` or ``clusters``: ``fsdp_orch/_data/<name>`` in a wheel, ``<repo>/<name>`` in a checkout."""
    packaged = _PACKAGE / "_data" / name
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / name


def home() -> Path:
    """``$FSDP_ORCH_HOME``, default ``~/.fsdp-orch``."""
    from fsdp_orch.store_path import home_dir

    return Path(home_dir())


def bootstrap_site_dir() -> Path:
    """The folder whose ``sitecustomize`` loads the bootstrap; the launch scripts put it on PYTHONPATH."""
    return _PACKAGE / "bootstrap" / "site"


def local_has_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU (resolves a local profile's ``device: auto``)."""
    return Path("/dev/nvidia0").exists()

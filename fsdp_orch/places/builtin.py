"""Where the built-in templates and cluster profiles are: inside the wheel, or the source checkout.
Plain os.path at import: ``status`` reads the profile folders
through here and never needs pathlib."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

_PACKAGE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # fsdp_orch/


def builtin_path(name: str) -> str:
    """``templates`` or ``clusters``: ``fsdp_orch/_data/<name>`` in a wheel,
    ``<repo>/<name>`` in a checkout."""
    packaged = os.path.join(_PACKAGE, "_data", name)
    if os.path.isdir(packaged):
        return packaged
    return os.path.join(os.path.dirname(_PACKAGE), name)


PROFILE_ORIGINS = ("project", "home", "built-in")


def profile_dirs(home: str, cwd: str | None = None) -> list[str]:
    """Where profiles are found, in search order (one per PROFILE_ORIGINS): ``./clusters``,
    ``$FSDP_ORCH_HOME/clusters``, the built-in ones."""
    return [os.path.join(cwd or os.getcwd(), "clusters"), os.path.join(home, "clusters"),
            builtin_path("clusters")]


def builtin_dir(name: str) -> Path:
    from pathlib import Path

    return Path(builtin_path(name))


def home() -> Path:
    """``$FSDP_ORCH_HOME``, default ``~/.fsdp-orch``."""
    from pathlib import Path

    from fsdp_orch.places.home import home_dir

    return Path(home_dir())


def bootstrap_site_dir() -> Path:
    """The folder whose ``sitecustomize`` loads the bootstrap;
    the launch scripts put it on PYTHONPATH."""
    from pathlib import Path

    return Path(_PACKAGE) / "bootstrap" / "site"


SUPERVISOR_MODULE = "fsdp_orch.supervise.supervisor"


def supervisor_command(python: str | None = None) -> tuple[str, ...]:
    """How the supervisor of a job is started (the job id and arguments follow). On the submitting
    machine (local, SSH hosts, TPU VMs): this Python, this fsdp-orch, always built here, never read
    from a file (a planted ``submission.json`` runs nothing). On a node (SLURM's allocation):
    ``python``, the profile's, with the fsdp-orch of its own environment; never this Python, whose
    path (a pipx venv on a login node) the nodes need not have (places.python_env)."""
    import sys

    return (python or sys.executable or "python3", "-m", SUPERVISOR_MODULE)


# Where the supervisor writes its job's metrics for node_exporter (supervise.metrics_textfile): the
# one FSDP_ORCH_ variable besides the home that a supervisor started here is given.
METRICS_TEXTFILE_ENV = "FSDP_ORCH_METRICS_TEXTFILE_DIR"


def local_has_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU (resolves a local profile's ``device: auto``)."""
    return os.path.exists("/dev/nvidia0")

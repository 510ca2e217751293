"""fsdp-orch's bootstrap, loaded by Python at start-up because the launch script put this folder
first on PYTHONPATH. Installs the agent (stdlib only, no torch import), then hands over to the
``sitecustomize`` that this one shadows, if there is one."""

import os
import sys


def _install_agent() -> None:
    if not os.environ.get("FSDP_ORCH_RUN_DIR"):
        return
    try:
        from fsdp_orch.bootstrap import agent
    except ImportError:
        # The job's interpreter is not the one fsdp-orch is installed in: load the stdlib-only
        # bootstrap from the package this file belongs to, without leaving that tree on sys.path.
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))))
        sys.path.insert(0, package_parent)
        try:
            from fsdp_orch.bootstrap import agent
        finally:
            sys.path.remove(package_parent)
    agent.install()


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path = sys.path[:]
    ours = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    finally:
        sys.path[:] = saved_path


try:
    _install_agent()
except Exception as exc:  # never stop the user's program: it runs unwatched instead
    print(f"[fsdp-orch] bootstrap disabled: {exc!r}", file=sys.stderr, flush=True)
_chain_next_sitecustomize()

"""What the agent wraps in torch: ``init_process_group``, so that a rank is watched from its
rendezvous on and its process group takes the job's collective timeout. Used once
``torch.distributed`` is imported; imports nothing of torch itself."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs milliseconds in every Python process of the job
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

    from fsdp_orch.bootstrap.agent import Agent


def wrap_init_process_group_everywhere(module: ModuleType, agent: Agent) -> None:
    """``torch.distributed``'s ``init_process_group`` wrapped (:func:`wrap_init_process_group`)
    there and in every loaded submodule that holds the same function."""
    original = getattr(module, "init_process_group", None)
    if original is None:  # torch built without distributed support
        return
    wrapped = wrap_init_process_group(original, agent)
    for name, loaded in list(sys.modules.items()):
        if (name == "torch.distributed" or name.startswith("torch.distributed.")) and \
                getattr(loaded, "init_process_group", None) is original:
            loaded.init_process_group = wrapped  # type: ignore[attr-defined]


def wrap_init_process_group(original: Callable[..., Any], agent: Agent) -> Callable[..., Any]:
    """``original`` with the job's collective timeout where the call gives none, activating
    ``agent`` for its rank before the rendezvous (a rank stuck inside it is visible) when the call
    or ``RANK`` names it, else after."""
    import functools

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if agent.collective_timeout and "timeout" not in kwargs and len(args) < 3:
            import datetime

            kwargs["timeout"] = datetime.timedelta(seconds=agent.collective_timeout)
        rank = kwargs.get("rank", args[4] if len(args) > 4 else -1)
        rank = rank if isinstance(rank, int) and rank >= 0 else agent.env_rank
        if rank >= 0:
            agent.activate(rank)  # before: a rank stuck inside the rendezvous is visible
        result = original(*args, **kwargs)
        if not agent.active:
            agent.activate(agent.process_group_rank())
        return result

    return init_process_group

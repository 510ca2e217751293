"""What the agent wraps in torch: ``init_process_group``, so that a rank is watched from its
rendezvous on and its process group takes the job's collective timeout (once ``torch.distributed``
is imported); DCP's ``_init_optim_state``, so that the optimizer step it takes is not counted (once
``torch.distributed.checkpoint.state_dict`` is). Imports nothing of torch itself."""

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
        agent.process_group_made()
        return result

    return init_process_group


def wrap_init_optim_state(module: ModuleType, agent: Agent) -> None:
    """DCP's ``set_state_dict``/``get_state_dict`` call ``_init_optim_state`` of ``module``
    (``torch.distributed.checkpoint.state_dict``), which steps the optimizer once with zero
    gradients and lr 0 to create its state before a load: the agent's ``_initialising_state`` counts
    the calls in progress, and its step hook counts no step meanwhile. One attribute read a step,
    where walking up the caller's frames to find the function took a microsecond."""
    original = getattr(module, "_init_optim_state", None)
    if original is None or getattr(original, "_fsdp_orch_wrapped", False):
        return
    import functools

    @functools.wraps(original)
    def _init_optim_state(*args: Any, **kwargs: Any) -> Any:
        agent._initialising_state += 1
        try:
            return original(*args, **kwargs)
        finally:
            agent._initialising_state -= 1

    _init_optim_state._fsdp_orch_wrapped = True  # type: ignore[attr-defined]
    module._init_optim_state = _init_optim_state  # type: ignore[attr-defined]

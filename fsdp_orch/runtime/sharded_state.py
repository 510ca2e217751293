"""What a checkpoint saves of the model and optimizer, for one way of sharding them, and how DCP
plans it. :class:`~fsdp_orch.runtime.checkpoint.Checkpointer` owns the layout and the commit."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn


class ShardedState(Protocol):
    """The model's and optimizer's state as one way of sharding hands it to DCP."""

    def for_save(self) -> dict[str, Any]: ...

    def for_load(self) -> dict[str, Any]:
        """The state dict DCP loads into (in place, or replacing its non-tensor values)."""
        ...

    def apply(self, state: dict[str, Any]) -> None:
        """Put what :meth:`for_load`'s dict holds after the load into the model and optimizer."""
        ...

    def nbytes(self, state: dict[str, Any]) -> int:
        """About what this rank writes of ``state`` (the disk-space check before a save)."""
        ...

    def save_planner(self) -> Any: ...  # a DCP SavePlanner, None for DCP's default

    def load_planner(self) -> Any: ...


class Fsdp2State:
    """FSDP2 (DTensor) state through ``torch.distributed.checkpoint.state_dict``: parameter names
    as keys, so DCP reshards it onto any world size."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None):
        self.model = model
        self.optimizer = optimizer

    def for_save(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        if self.optimizer is None:
            return {"model": get_model_state_dict(self.model)}
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def for_load(self) -> dict[str, Any]:
        return self.for_save()

    def apply(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        if self.optimizer is None:
            set_model_state_dict(self.model, state["model"])
        else:
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])

    def for_load_model(self) -> dict[str, Any]:
        """The model alone (a warm start without the optimizer): ``for_load`` would make a fresh
        optimizer's state by a step of its own, and that step would count."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return {"model": get_model_state_dict(self.model)}

    def apply_model(self, state: dict[str, Any]) -> None:
        """Only the model of a loaded state (a warm start without the optimizer)."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(self.model, state["model"])

    def nbytes(self, state: dict[str, Any]) -> int:
        return state_nbytes(state)

    def save_planner(self) -> Any:
        return None

    def load_planner(self) -> Any:
        return None


def state_nbytes(state: Any) -> int:
    """The bytes of the tensors in ``state`` this rank holds (a DTensor's local shard)."""
    return sum(_nbytes(v) for v in _leaves(state))


def _leaves(state: Any):
    if isinstance(state, dict):
        for value in state.values():
            yield from _leaves(value)
    elif isinstance(state, (list, tuple)):
        for value in state:
            yield from _leaves(value)
    else:
        yield state


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        local = value.to_local() if hasattr(value, "to_local") else value
        return local.numel() * local.element_size()
    return 0


__all__ = ["Fsdp2State", "ShardedState", "state_nbytes"]

"""A peer lost, a process killed or a hang may be a node that died: where the kind finds one that
stopped answering, that is the failure, and the survivors' errors only echo it."""

from __future__ import annotations

from dataclasses import dataclass

from fsdp_orch.vocab.categories import COMMUNICATION, FailureCategory

NODE_LOST = FailureCategory.PREEMPTION_OR_NODE_LOST
# what a node's death looks like from the ranks that survive it
ECHOES = frozenset({*COMMUNICATION, FailureCategory.HANG, FailureCategory.UNKNOWN, NODE_LOST})


@dataclass(frozen=True)
class LostNode:
    category: str
    evidence: str


def may_be_a_lost_node(category: str) -> bool:
    """Whether a failure of ``category`` is worth asking the kind about a lost node."""
    return category in ECHOES


def lost_node_instead(category: str, lost: str | None) -> LostNode | None:
    """The failure to record in place of one of ``category``, given what the kind says of a lost
    node (``lost``: its evidence, or None); None: the failure stands."""
    if not may_be_a_lost_node(category) or lost is None:
        return None
    return LostNode(NODE_LOST, lost)


__all__ = ["ECHOES", "NODE_LOST", "LostNode", "lost_node_instead", "may_be_a_lost_node"]

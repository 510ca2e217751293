"""The notices an attempt's watch writes as it looks, each once or at its own pace: why the hang
rule holds its verdict back (for ``status``), which node each rank runs on (``ranks.json``), a
node's note from its launch script, connections refused at the node channel, and a node's
channel going silent and heard again."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from fsdp_orch.backends.base import AttemptHandle
from fsdp_orch.decide.watchdog import Hold
from fsdp_orch.launch.plan import attempt_dir_of
from fsdp_orch.launch.submission import Submission
from fsdp_orch.observe.attempt_files import RANKS_FILE
from fsdp_orch.observe.heartbeats import NO_PROCESS_GROUP, Heartbeat
from fsdp_orch.places.private import write_private
from fsdp_orch.record.hang_hold import HOLD_EVERY_S, write_hold
from fsdp_orch.record.journal import Journal
from fsdp_orch.vocab.states import WAITING

REFUSED_CONNECTIONS = "refused_connections"  # the notice of strangers at the node channel
RANKS_APART = "ranks_apart"  # ranks stepping with no process group in a job of several
NODE_TMP_TAKEN = "node_tmp_taken"  # a node's /tmp/fsdp-orch-<uid> was someone else's
STRANGERS_NOTICE_S = 30.0
PAUSE_WORTH_SAYING_S = 5.0  # a node silent this long and heard again: said (node_heard_again)


class AttemptNotices:
    def __init__(self, journal: Journal, submission: Submission, handle: AttemptHandle, *,
                 attempt: int, world: int, clock: Callable[[], float]):
        self.journal = journal
        self.sub = submission
        self.handle = handle
        self.attempt = attempt
        self.world = world
        self.clock = clock
        self._silent: dict[int, float] = {}  # the nodes silent at the last look, for how long
        self._strangers_noted, self._strangers_noted_at = 0, float("-inf")
        self._nodes_noted: set[int] = set()
        self._waiting_said: str | None = None
        self._apart_said = False
        self._placed = False  # ranks.json written
        # why the hang rule holds its verdict back, as last written for status (None: nothing
        # held), and when
        self._hold: Hold | None = None
        self._hold_written_at = float("-inf")

    def hold(self, hold: Hold | None, now: float) -> None:
        """Why the verdict is held back (``record.hang_hold``), for ``status``: written as the rule
        or its subject changes, and every HOLD_EVERY_S while only its deadline moves."""
        before = self._hold
        if hold == before:
            return
        same_rule = (hold is not None and before is not None
                     and (hold.rule, hold.rank, hold.subject, hold.since)
                     == (before.rule, before.rank, before.subject, before.since))
        if same_rule and now - self._hold_written_at < HOLD_EVERY_S:
            return
        self._hold, self._hold_written_at = hold, now
        write_hold(str(self.sub.run_dir), self.attempt, None if hold is None else hold.to_json())

    def placement(self, beats: dict[int, Heartbeat]) -> None:
        """Which node each rank runs on, once all are known, in the attempt's ``ranks.json``
        (``logs --rank``): torchrun's c10d rendezvous need not give node N ranks N*procs..."""
        if self._placed or len(beats) < self.world or any(b.node is None for b in beats.values()):
            return
        self._placed = True
        placed = {str(rank): beat.node for rank, beat in sorted(beats.items())}
        try:  # the supervisor's own view of the run folder (SSH hosts' own disks have theirs)
            write_private(os.path.join(attempt_dir_of(str(self.sub.run_dir), self.attempt),
                                       RANKS_FILE), json.dumps({"nodes": placed}) + "\n")
        except OSError:
            pass  # logs --rank then takes the launcher's order

    def nodes(self) -> None:
        """Each node's note from its launch script, once (``node_tmp_taken``)."""
        for node, note in sorted(self.handle.node_notes().items()):
            if node not in self._nodes_noted:
                self._nodes_noted.add(node)
                self.journal.add_event(attempt=self.attempt, kind=NODE_TMP_TAKEN,
                                       message=f"node {node}: node-local folder taken: {note}")

    def waiting(self) -> None:
        """A notice each time the cluster gives a new reason the attempt's nodes wait."""
        why = self.handle.waiting_for()
        if why is not None and why != self._waiting_said:
            self._waiting_said = why
            self.journal.add_event(attempt=self.attempt, kind=WAITING, message=why)

    def apart(self, beats: dict[int, Heartbeat]) -> None:
        """A notice, once, when ranks of a job of several take optimizer steps with no process
        group (``NO_PROCESS_GROUP``): each trains a model of its own, and they save over each
        other's checkpoints. Not under the xla launcher (SPMD needs no process group)."""
        if self._apart_said or self.world < 2 or self.sub.job.launcher == "xla":
            return
        apart = sorted(rank for rank, beat in beats.items() if beat.metrics.get(NO_PROCESS_GROUP))
        if not apart:
            return
        self._apart_said = True
        job = self.sub.job
        self.journal.add_event(attempt=self.attempt, kind=RANKS_APART, message=(
            f"rank(s) {', '.join(map(str, apart))} take optimizer steps with no torch.distributed "
            f"process group, though the job starts {self.world} ranks (WORLD_SIZE): each such rank "
            "trains a model of its own and saves where the others do. To train one model, set up "
            "distributed training in the script (Lightning: Trainer(num_nodes="
            f"{job.nodes}, devices={self.world // max(1, job.nodes)}, strategy=\"ddp\")); to "
            "train one alone, run 1 rank"))

    def strangers(self) -> None:
        """A notice when connections that never said the token were refused since the last one:
        counts only, at most one a STRANGERS_NOTICE_S (a flood is one line, not a thousand)."""
        refused = self.handle.refused_connections()
        total = sum(refused.values())
        now = self.clock()
        if total <= self._strangers_noted or now - self._strangers_noted_at < STRANGERS_NOTICE_S:
            return
        counts = ", ".join(f"{n} {why}" for why, n in refused.items() if n)
        self.journal.add_event(attempt=self.attempt, kind=REFUSED_CONNECTIONS, message=(
            f"{total} connection(s) to the node channel refused so far, none of them having said "
            f"this attempt's token ({counts}); what they sent was dropped unread"))
        self._strangers_noted, self._strangers_noted_at = total, now

    def silence(self, silent: dict[int, float]) -> None:
        """The nodes whose channel is silent (``handle.silent_nodes``): while any is, the hang rule
        waits; such a node is heard again or found lost (``poll``) within the node timeout. Each
        silence is recorded once, as it begins."""
        if silent and not self._silent:
            nodes = ", ".join(f"node {n} for {s:.1f}s" for n, s in sorted(silent.items()))
            self.journal.add_event(attempt=self.attempt, kind="node_silent", message=(
                f"no word from {nodes}: its ranks' heartbeats come through it, "
                "so no hang is judged until it is heard again or found lost"))
        for node in sorted(n for n in set(self._silent) - set(silent)
                           if self._silent[n] >= PAUSE_WORTH_SAYING_S):
            # heard again before the node timeout: paused (a VM pause, a live migration, a stall
            # of the host), not lost
            self.journal.add_event(attempt=self.attempt, kind="node_heard_again", message=(
                f"node {node} heard again after about {self._silent[node]:.0f}s of silence, within "
                f"the node timeout ({self.sub.job.watch.node_timeout:g}s): paused, not lost"))
        self._silent = dict(silent)


__all__ = ["NODE_TMP_TAKEN", "PAUSE_WORTH_SAYING_S", "REFUSED_CONNECTIONS", "STRANGERS_NOTICE_S",
           "AttemptNotices"]

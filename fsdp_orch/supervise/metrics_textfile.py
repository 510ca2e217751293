"""The supervisor's own job as a node_exporter textfile, as the job goes: with
``FSDP_ORCH_METRICS_TEXTFILE_DIR`` in its environment, the supervisor writes
``DIR/fsdp_orch_job_<id>.prom`` every ``EVERY_S`` and once more at the job's end (docs/guides/
metrics.md). The figures are those of ``fsdp-orch metrics`` (``prometheus.families``), of the job's
status folded from its event log as the index would fold it, plus the supervisor's own pace:
the longest time between two of its looks at an attempt since the last write.

A write folds the job's log (milliseconds) and replaces one small file: at one every 15 s, nothing
the supervisor's loop would feel. A failed write is said once on the supervisor's log and never
fails the job.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from fsdp_orch.places.builtin import METRICS_TEXTFILE_ENV

log = logging.getLogger(__name__)
EVERY_S = 15.0
POLL_METRIC = "fsdp_orch_supervisor_poll_interval_seconds"


class MetricsTextfile:
    """One per supervisor: ``look`` at each of the attempt loop's looks, ``write`` at the end."""

    def __init__(self, folder: str, run_dir: str, job_id: str, clock: Callable[[], float],
                 every: float = EVERY_S, tell: Callable[[str], None] | None = None):
        """``tell``: how a failed write reaches the job's events (once)."""
        self.folder, self.run_dir, self.job_id = folder, run_dir, job_id
        self.tell = tell
        self.clock, self.every = clock, every
        self._looked_at: float | None = None
        self._attempt: int | None = None
        self._longest = 0.0  # seconds between two looks, since the last write
        self._written_at = float("-inf")
        self._failed = False

    @classmethod
    def from_environ(cls, run_dir: str, job_id: str, clock: Callable[[], float],
                     environ: Mapping[str, str] = os.environ,
                     tell: Callable[[str], None] | None = None) -> MetricsTextfile | None:
        folder = environ.get(METRICS_TEXTFILE_ENV)
        return cls(folder, run_dir, job_id, clock, tell=tell) if folder else None

    @property
    def path(self) -> str:
        return os.path.join(self.folder, f"fsdp_orch_job_{self.job_id}.prom")

    def look(self, attempt: int) -> None:
        """One of the attempt loop's looks (the time between attempts is not the loop's pace)."""
        now = self.clock()
        if self._looked_at is not None and attempt == self._attempt:
            self._longest = max(self._longest, now - self._looked_at)
        self._looked_at, self._attempt = now, attempt
        if now - self._written_at >= self.every:
            self.write()

    def write(self) -> None:
        """The job's metrics as its event log tells them now, replacing the file whole."""
        from prometheus_client.core import GaugeMetricFamily
        from prometheus_client.registry import CollectorRegistry

        from fsdp_orch.prometheus.collector import user_name
        from fsdp_orch.prometheus.families import JOB_LABELS, families, job_labels
        from fsdp_orch.prometheus.textfile import write_textfile
        from fsdp_orch.record.journal import read_status

        now = self.clock()
        status = read_status(self.run_dir, self.job_id)
        if status is None:
            return
        user = user_name()
        found = families([status], now, user)
        if self._looked_at is not None:
            pace = GaugeMetricFamily(POLL_METRIC, "the longest time between two of the "
                                     "supervisor's looks at the attempt since the last write",
                                     labels=list(JOB_LABELS))
            pace.add_metric(job_labels(status, user), self._longest)
            found.append(pace)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Fixed(found))
        try:
            write_textfile(self.folder, registry, name=os.path.basename(self.path))
        except OSError as exc:
            if not self._failed:
                message = f"cannot write the metrics to {self.path}: {exc.strerror or exc}"
                log.warning(f"fsdp-orch supervisor: {message}")
                if self.tell is not None:
                    self.tell(message)
            self._failed = True
        self._written_at, self._longest = now, 0.0


class _Fixed:
    """Families made already (a registry asks a collector for them at each exposition)."""

    def __init__(self, found: list):  # type: ignore[type-arg]
        self.found = found

    def collect(self):
        return iter(self.found)

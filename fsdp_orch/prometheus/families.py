"""The jobs' metrics as Prometheus metric families, computed from their ``JobStatus`` (what
``status --json`` shows, folded from their events). Pure: the caller passes the statuses, the time
and the user; nothing here reads a file or the clock.

Every job's series carry ``job_id``, ``name``, ``cluster`` and ``user``; a few add one bounded label
(``state``, ``category``, ``reason``: words of ``vocab``, never free text). No per-rank labels: a
straggler is named by a gauge's value (its rank), not by a label. The two histograms describe all
of the user's jobs on a cluster, not one job each, so their series do not grow with the jobs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from statistics import median

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from fsdp_orch.record.event_types import STRAGGLER
from fsdp_orch.record.goodput import BADPUT, PRODUCTIVE
from fsdp_orch.record.status import JobStatus
from fsdp_orch.vocab.categories import FailureCategory

PREFIX = "fsdp_orch_"
JOB_LABELS = ("job_id", "name", "cluster", "user")
# A failure's action after which the job went on in a new attempt (the others: give_up).
RESTARTING_ACTIONS = ("restart", "requeue")
HANG = FailureCategory.HANG.value
# Seconds: a hang window is seconds to minutes; a recovery (backoff, launch, imports, loading the
# checkpoint) seconds to an hour.
DETECTION_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
RECOVERY_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
NODE_SILENT = "node_silent"  # supervise.attempt_notices
REFUSED_CONNECTIONS = "refused_connections"
_RANK = re.compile(r"\brank (\d+):")  # stragglers.Straggler.message
_REFUSED = re.compile(r"^(\d+) connection")  # attempt_notices.AttemptNotices.strangers


def families(jobs: Sequence[JobStatus], now: float, user: str) -> list[Metric]:
    """Every metric family of ``jobs`` as read at ``now`` (the age of a checkpoint, a stall)."""
    return [*_states(jobs, user), *_goodput(jobs, user), *_failures(jobs, user),
            *_histograms(jobs, user), *_progress(jobs, now, user), *_checkpoints(jobs, now, user),
            *_notices(jobs, user)]


def job_labels(job: JobStatus, user: str) -> list[str]:
    return [job.id, job.name, job.cluster, user]


def _gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, labels=[*JOB_LABELS, *extra])


def _counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, labels=[*JOB_LABELS, *extra])


def _states(jobs: Sequence[JobStatus], user: str) -> list[Metric]:
    """One series a job, its state's (a state left goes stale at the next scrape): a series for
    every state and job would be most of a scrape of many ended jobs."""
    state = _gauge("job_state", "1, labelled with the job's state", ("state",))
    for job in jobs:
        state.add_metric([*job_labels(job, user), job.state], 1.0)
    return [state]


def _goodput(jobs: Sequence[JobStatus], user: str) -> list[Metric]:
    """The breakdown ``status --json`` shows (to the job's end; while it runs, to its latest
    event): ``JobStatus.goodput``, computed nowhere else."""
    ratio = _gauge("job_goodput_ratio", "productive seconds over wall seconds, as status --json's "
                   "goodput_pct / 100")
    productive = _counter("job_productive_seconds", "wall seconds spent on training steps "
                          "that counted (the goodput bucket 'productive')")
    badput = _counter("job_badput_seconds", "wall seconds lost, by goodput bucket (absent: 0)",
                      ("category",))
    for job in jobs:
        labels = job_labels(job, user)
        breakdown = job.goodput()
        pct = breakdown.goodput_pct
        if pct is not None:
            ratio.add_metric(labels, pct / 100.0)
        productive.add_metric(labels, breakdown.seconds[PRODUCTIVE])
        for bucket in BADPUT:
            if round(breakdown.seconds[bucket], 3) > 0:  # as status --json rounds: absent is 0
                badput.add_metric([*labels, bucket], breakdown.seconds[bucket])
    return [ratio, productive, badput]


def _failures(jobs: Sequence[JobStatus], user: str) -> list[Metric]:
    restarts = _counter("job_restarts", "attempts started again after a failure, by the failure's "
                        "category", ("reason",))
    failures = _counter("failures", "failures the supervisor explained, by category",
                        ("category",))
    for job in jobs:
        labels = job_labels(job, user)
        for category, count in _count(f.category for f in job.failures
                                      if f.action in RESTARTING_ACTIONS).items():
            restarts.add_metric([*labels, category], count)
        for category, count in _count(f.category for f in job.failures).items():
            failures.add_metric([*labels, category], count)
    return [restarts, failures]


def _histograms(jobs: Sequence[JobStatus], user: str) -> list[Metric]:
    """Hang detection (a hang's last step to its verdict: the stall the watchdog measured) and
    recovery (a restarting verdict to the next attempt's first step), over each cluster's jobs."""
    detection: dict[str, list[float]] = {}
    recovery: dict[tuple[str, str], list[float]] = {}
    for job in jobs:
        for seconds in detection_seconds(job):
            detection.setdefault(job.cluster, []).append(seconds)
        for category, seconds in recovery_seconds(job):
            recovery.setdefault((job.cluster, category), []).append(seconds)
    detect = HistogramMetricFamily(PREFIX + "hang_detection_seconds", "a hang's last step to the "
                                   "supervisor's verdict", labels=["cluster", "user"])
    for cluster, values in sorted(detection.items()):
        detect.add_metric([cluster, user], *_buckets(values, DETECTION_BUCKETS))
    recover = HistogramMetricFamily(PREFIX + "recovery_seconds", "a failure's verdict to the next "
                                    "attempt's first step, by the failure's category",
                                    labels=["cluster", "user", "reason"])
    for (cluster, category), values in sorted(recovery.items()):
        recover.add_metric([cluster, user, category], *_buckets(values, RECOVERY_BUCKETS))
    return [detect, recover]


def detection_seconds(job: JobStatus) -> list[float]:
    return [f.stalled_for_s for f in job.failures
            if f.category == HANG and f.stalled_for_s is not None]


def recovery_seconds(job: JobStatus) -> list[tuple[str, float]]:
    """(category, seconds) of each failure the job went on from, once the next attempt stepped."""
    out = []
    for failure in job.failures:
        following = job.attempt_records.get(failure.attempt + 1)
        if (failure.action in RESTARTING_ACTIONS and following is not None
                and following.first_step_at is not None):
            out.append((failure.category, max(0.0, following.first_step_at - failure.detected_at)))
    return out


def _buckets(values: list[float],
             bounds: tuple[float, ...]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative bucket counts (``le``, +Inf last) and the sum, as HistogramMetricFamily takes."""
    counts = [(repr(bound), float(sum(1 for v in values if v <= bound))) for bound in bounds]
    return [*counts, ("+Inf", float(len(values)))], sum(values)


def _progress(jobs: Sequence[JobStatus], now: float, user: str) -> list[Metric]:
    step = _gauge("job_step", "rank 0's latest training step")
    rate = _gauge("job_steps_per_second", "a running job's steps per second (the median of its "
                  "recent step times)")
    stalled = _gauge("job_stalled_seconds", "seconds since a running job's last progress once "
                     "status calls it stalled, else 0")
    for job in jobs:
        labels = job_labels(job, user)
        if job.progress_step is not None:
            step.add_metric(labels, job.progress_step)
        if not job.running:
            continue
        per_step = median(job.step_seconds) if job.step_seconds else 0.0
        if per_step > 0:
            rate.add_metric(labels, 1.0 / per_step)
        stalled.add_metric(labels, job.stalled_for_s(now) or 0.0)
    return [step, rate, stalled]


def _checkpoints(jobs: Sequence[JobStatus], now: float, user: str) -> list[Metric]:
    step = _gauge("last_complete_checkpoint_step", "the step of the job's latest complete "
                  "checkpoint (absent while none, or its step is unknown)")
    age = _gauge("last_complete_checkpoint_age_seconds", "an active job's latest complete "
                 "checkpoint's age at the scrape")
    for job in jobs:
        labels = job_labels(job, user)
        if job.last_checkpoint_path is not None and job.last_checkpoint_step is not None:
            step.add_metric(labels, job.last_checkpoint_step)
        if job.last_checkpoint_at is not None and not job.ended:
            age.add_metric(labels, max(0.0, now - job.last_checkpoint_at))
    return [step, age]


def _notices(jobs: Sequence[JobStatus], user: str) -> list[Metric]:
    """What the supervisor noticed: every notice by kind, and of those the stragglers named, the
    nodes that fell silent and the connections refused at the node channel. Counts of 0 are left
    out (most jobs have none: absent means 0)."""
    notices = _counter("job_notices", "the supervisor's notices (not failures), by kind",
                       ("category",))
    stragglers = _counter("job_stragglers", "stragglers named (a rank the others keep waiting for)")
    straggler = _gauge("job_straggler_rank", "the rank last named a straggler in a running job's "
                       "current attempt")
    silent = _counter("job_nodes_silent", "times a node's channel fell silent")
    refused = _counter("job_refused_connections", "connections to the node channel refused "
                       "(they never said the attempt's token)")
    for job in jobs:
        labels = job_labels(job, user)
        kinds = _count(n.kind for n in job.notices)
        for kind, count in kinds.items():
            notices.add_metric([*labels, kind], count)
        for family, count in ((stragglers, kinds.get(STRAGGLER, 0)),
                              (silent, kinds.get(NODE_SILENT, 0)),
                              (refused, refused_connections(job))):
            if count:
                family.add_metric(labels, count)
        rank = straggler_rank(job)
        if rank is not None:
            straggler.add_metric(labels, rank)
    return [notices, stragglers, straggler, silent, refused]


def straggler_rank(job: JobStatus) -> int | None:
    """The rank of the latest straggler named in the running job's current attempt."""
    if not job.running:
        return None
    current = job.attempts - 1
    for notice in reversed(job.notices):
        if notice.kind == STRAGGLER and notice.attempt == current:
            found = _RANK.search(notice.message)
            return int(found.group(1)) if found else None
    return None


def refused_connections(job: JobStatus) -> int:
    """The connections refused, over the attempts (each attempt's notices count from its start)."""
    per_attempt: dict[int | None, int] = {}
    for notice in job.notices:
        found = _REFUSED.match(notice.message) if notice.kind == REFUSED_CONNECTIONS else None
        if found:
            per_attempt[notice.attempt] = max(per_attempt.get(notice.attempt, 0),
                                              int(found.group(1)))
    return sum(per_attempt.values())


def _count(words: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    return counts


__all__ = ["JOB_LABELS", "families", "detection_seconds", "recovery_seconds",
           "refused_connections", "straggler_rank"]

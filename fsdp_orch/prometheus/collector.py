"""The exporter's collector: at each scrape, the index brought up to date with the event logs (what
``status`` reads; the ranks and the nodes are never asked) and its jobs as metric families."""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from fsdp_orch.prometheus.families import families
from fsdp_orch.record.index import JobIndex, open_index


def user_name() -> str:
    """The user whose jobs the index holds: this process's (each user has their own home)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def look(home: str | None) -> JobIndex:
    """The index as a scrape reads it: never made by a scrape (record.index)."""
    return open_index(home, read_only=True)


class IndexCollector(Collector):
    """Reads the index at scrape time: no gauge is kept between scrapes."""

    def __init__(self, home: str | None = None,
                 opener: Callable[[str | None], JobIndex] = look,
                 clock: Callable[[], float] = time.time):
        self.home, self.opener, self.clock = home, opener, clock
        self.user = user_name()

    def collect(self) -> Iterator[Metric]:
        with self.opener(self.home) as index:
            index.ingest()
            jobs = index.store.jobs()
        yield from families(jobs, self.clock(), self.user)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # nothing read at registration: the index is read at each scrape


def registry(home: str | None = None) -> CollectorRegistry:
    """A registry of the index's jobs alone (no process or platform metrics of the exporter)."""
    found = CollectorRegistry(auto_describe=False)
    found.register(IndexCollector(home))
    return found

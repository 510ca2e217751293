"""Which flight recorder the bootstrap dumps when the supervisor asks (a hang verdict): NCCL's where
this torch has it and it holds entries, else the generic one that gloo writes to. On an H200 the
generic one gave an empty dump for a rank hung behind an NCCL all_reduce (scripts/gpu-check.sh);
this machine's CPU torch has no NCCL, so NCCL's side is a FAKE module here, named as such."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

from fsdp_orch.bootstrap.flight_recorder import flight_recorder_dump


def _dump(entries: list) -> bytes:
    return pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": entries})


NCCL_ENTRY = {"profiling_name": "nccl:all_reduce", "collective_seq_id": 81, "state": "scheduled"}
GLOO_ENTRY = {"profiling_name": "gloo:all_reduce", "collective_seq_id": 6, "state": "scheduled"}


def test_the_nccl_recorder_is_dumped_where_it_holds_the_collectives():
    fake_c10d = SimpleNamespace(_dump_nccl_trace=lambda: _dump([NCCL_ENTRY]),
                                _dump_fr_trace=lambda: _dump([]))
    assert pickle.loads(flight_recorder_dump(fake_c10d))["entries"] == [NCCL_ENTRY]


def test_gloo_collectives_are_dumped_when_the_nccl_recorder_is_empty():
    fake_c10d = SimpleNamespace(_dump_nccl_trace=lambda: _dump([]),
                                _dump_fr_trace=lambda: _dump([GLOO_ENTRY]))
    assert pickle.loads(flight_recorder_dump(fake_c10d))["entries"] == [GLOO_ENTRY]


def test_an_empty_dump_is_still_written_for_its_group_statuses_and_no_recorder_gives_none():
    fake_c10d = SimpleNamespace(_dump_fr_trace=lambda: _dump([]))
    assert pickle.loads(flight_recorder_dump(fake_c10d))["entries"] == []
    assert flight_recorder_dump(SimpleNamespace()) is None


def test_this_torchs_own_recorder_is_dumped():
    import torch._C._distributed_c10d as c10d

    data = flight_recorder_dump(c10d)
    assert data is not None and "entries" in pickle.loads(data)

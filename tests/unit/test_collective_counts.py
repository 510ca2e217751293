"""Which rank is behind in its collectives: flight recorder dumps (real ones that torch 2.13 CPU
wrote for a hung gloo job, pickle and JSON; the tutorial's documented NCCL dump; older layouts built
here) and NCCL RAS output (the excerpts NVIDIA documents, one built from NCCL 2.26's format strings,
the JSON sample), the ordering, and bad input. Fixtures:
tests/fixtures/collective_counts/README.md."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from fsdp_orch.observe.collective_counts import (
    FlightRecord,
    choose_group,
    counts_from_dumps,
    parse_dumps,
    parse_flight_recorder,
    pending_collectives,
    rank_from_name,
    ranks_behind,
)
from fsdp_orch.observe.nccl_ras import parse_ras_status

FIXTURES = Path(__file__).parents[1] / "fixtures" / "collective_counts"


def dumps(scenario: str, json_form: bool = False) -> dict[int, FlightRecord]:
    folder = FIXTURES / scenario / ("json" if json_form else "")
    return parse_dumps({str(p): p.read_bytes() for p in folder.glob("nccl_trace_rank_*")})


def ras(name: str):
    report = parse_ras_status((FIXTURES / name).read_text())
    assert report is not None
    return report


# --- the flight recorder: real gloo dumps --------------------------------------------------------

@pytest.mark.parametrize("json_form", [False, True], ids=["pickle", "json"])
def test_a_real_gloo_dump_gives_each_groups_sequence_numbers_and_where_the_rank_waits(json_form):
    records = dumps("gloo-behind", json_form)
    assert sorted(records) == [0, 1]
    waiting, behind = records[0], records[1]
    assert (waiting.version, waiting.rank, waiting.entries) == ("2.10", 0, 7)
    default = waiting.groups["0"]
    assert (default.desc, default.last_enqueued, default.last_started, default.last_completed) == \
        ("default_pg", 6, -1, 5)  # gloo tracks no start
    assert (default.last_collective, default.waiting_in) == ("gloo:all_reduce", "gloo:all_reduce")
    assert behind.groups["0"].last_enqueued == 5 and behind.groups["0"].waiting_in is None
    assert behind.groups["0"].last_collective == "gloo:barrier"
    assert waiting.groups["1"].desc == "undefined" and waiting.groups["1"].last_enqueued == 1
    # A queued gloo collective does not place a rank: its stack shows where it blocks (a rank hung
    # in user code with an FSDP prefetch queued was called "in all_reduce (queued)" under load)
    assert pending_collectives(records) == {}


@pytest.mark.parametrize("json_form", [False, True], ids=["pickle", "json"])
def test_the_rank_that_skipped_a_collective_is_behind(json_form):
    records = dumps("gloo-behind", json_form)
    assert choose_group(records) == "0"
    assert counts_from_dumps(records) == {0: 6, 1: 5}  # no rank tracked starts: the enqueued count
    assert ranks_behind(counts_from_dumps(records)) == [1]


def test_ranks_waiting_in_different_groups_are_compared_on_the_default_group_first():
    records = dumps("gloo-mismatch")
    assert records[1].groups["1"].waiting_in == "gloo:barrier"  # rank 1 waits in the pair's barrier
    assert choose_group(records) == "0"
    assert ranks_behind(counts_from_dumps(records)) == [1]
    assert counts_from_dumps(records, group="1") == {0: 1, 1: 2}  # on the pair, rank 0 is behind
    assert ranks_behind(counts_from_dumps(records, group="1")) == [0]


def test_the_pickle_and_json_dumps_of_one_rank_agree():
    for scenario in ("gloo-behind", "gloo-mismatch"):
        assert dumps(scenario) == dumps(scenario, json_form=True)


# --- the flight recorder: documented and older layouts -------------------------------------------

def test_the_tutorials_documented_nccl_dump():
    record = parse_flight_recorder((FIXTURES / "nccl-tutorial-v2.5.pkl").read_bytes(), rank=3)
    assert record is not None and (record.version, record.rank) == ("2.5", 3)
    group = record.groups["0"]
    assert (group.last_enqueued, group.last_started, group.last_completed) == (2, -1, 2)
    assert (group.last_collective, group.waiting_in) == ("nccl:all_reduce", None)


def nccl_entry(seq: int, state: str, name: str = "nccl:all_reduce",
               pg: tuple[str, str] = ("0", "default_pg"), pg_id: int = 0, **extra) -> dict:
    return {"record_id": seq - 1, "pg_id": pg_id, "process_group": pg, "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": name, "state": state, "retired": False,
            "is_p2p": False, **extra}


def test_started_counts_are_used_where_every_rank_tracked_them():
    def dump(enqueued: int, started: int, completed: int) -> bytes:
        return pickle.dumps({"version": "2.10", "entries": [nccl_entry(enqueued, "started")],
                             "pg_status": {"0": {"last_enqueued_collective": enqueued,
                                                 "last_started_collective": started,
                                                 "last_completed_collective": completed}}},
                            protocol=2)

    records = parse_dumps({"nccl_trace_rank_0": dump(9, 8, 7), "nccl_trace_rank_1": dump(9, 9, 8)})
    assert counts_from_dumps(records) == {0: 8, 1: 9}  # TORCH_NCCL_ENABLE_TIMING: the GPU's start
    records[2] = parse_flight_recorder(dump(9, -1, 8), rank=2)  # a rank without start events
    assert counts_from_dumps(records) == {0: 9, 1: 9, 2: 9}


def test_a_dump_without_pg_status_is_read_from_its_entries():
    # versions 2.0-2.4: collective_seq_id, no pg_status; p2p entries do not count
    entries = [nccl_entry(1, "completed"), nccl_entry(2, "completed"), nccl_entry(3, "started"),
               nccl_entry(4, "scheduled", "nccl:_allgather_base"),
               nccl_entry(4, "scheduled", "nccl:send 0->1", is_p2p=True)]
    record = parse_flight_recorder(pickle.dumps({"version": "2.2", "entries": entries}))
    assert record is not None
    group = record.groups["0"]
    assert (group.last_enqueued, group.last_started, group.last_completed) == (4, 3, 2)
    assert (group.waiting_in, group.last_collective) == ("nccl:all_reduce", "nccl:send 0->1")


def test_a_version_1_dump_names_the_sequence_seq_id_and_has_no_group_names():
    # the layout of TraceUtils.h's dump() at version "1.4": seq_id, pg_config {pg_id: [ranks]}
    entries = [{"record_id": i, "pg_id": 0, "seq_id": i + 1, "op_id": i + 1,
                "profiling_name": "nccl:all_reduce", "state": state, "retired": True}
               for i, state in enumerate(["completed", "completed", "scheduled"])]
    record = parse_flight_recorder(pickle.dumps({"version": "1.4", "entries": entries,
                                                 "pg_config": {0: [0, 1]}}, protocol=2))
    assert record is not None and list(record.groups) == ["0"]
    assert (record.groups["0"].last_enqueued, record.groups["0"].last_completed) == (3, 2)


def test_a_dump_without_collectives_still_gives_pg_status():
    data = json.dumps({"version": "2.10", "pg_status": {"0": {"last_enqueued_collective": "12",
                       "last_started_collective": "-1", "last_completed_collective": "11"}}})
    record = parse_flight_recorder(data.encode())
    assert record is not None and record.groups["0"].last_enqueued == 12 and record.entries == 0


def test_the_rank_comes_from_the_file_name():
    assert rank_from_name("/attempt/3/nccl_trace_rank_12") == 12
    assert rank_from_name("trace_5", prefix="trace_") == 5
    assert rank_from_name("nccl_trace_rank_12.tmp") is None
    assert rank_from_name("nccl_trace_rank_") is None


# --- the flight recorder: bad input ------------------------------------------------------------

class _Runs:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_a_pickle_with_a_global_is_refused_and_nothing_runs(tmp_path):
    target = tmp_path / "ran"
    hostile = pickle.dumps({"version": "2.10", "entries": [], "x": _Runs(str(target))}, protocol=2)
    assert parse_flight_recorder(hostile) is None
    assert not target.exists()


@pytest.mark.parametrize("data", [
    b"", b"garbage", b"\x80\x02", b"{", b"[1, 2]", b'{"a": 1}', b'{"entries": 3}', b"\xff\xfe{",
    pickle.dumps([1, 2]), pickle.dumps({"version": "2.10"}),
], ids=lambda d: repr(d[:12]))
def test_what_is_no_dump_gives_none(data):
    assert parse_flight_recorder(data) is None


def test_every_truncation_of_a_real_dump_gives_none_or_a_record():
    data = (FIXTURES / "gloo-behind" / "nccl_trace_rank_0").read_bytes()
    for cut in range(len(data)):
        assert parse_flight_recorder(data[:cut]) is None, cut
    text = (FIXTURES / "gloo-behind" / "json" / "nccl_trace_rank_0").read_bytes()
    assert all(parse_flight_recorder(text[:cut]) is None for cut in range(len(text) - 2))


def test_files_that_are_not_dumps_are_left_out():
    real = (FIXTURES / "gloo-behind" / "nccl_trace_rank_1").read_bytes()
    records = parse_dumps({"nccl_trace_rank_0": b"cut", "nccl_trace_rank_1": real, "other_2": real})
    assert list(records) == [1]
    assert counts_from_dumps({}) == {} and choose_group({}) is None


# --- the ordering --------------------------------------------------------------------------------

def test_ranks_behind_orders_the_furthest_behind_first():
    assert ranks_behind({0: 10, 1: 8, 2: 10, 3: 9, 4: 8}) == [1, 4, 3]
    assert ranks_behind({0: 5, 1: 5}) == []
    assert ranks_behind({}) == []


# --- NCCL RAS ----------------------------------------------------------------------------------

def test_the_documented_mismatch_lists_the_ranks_one_operation_behind():
    report = ras("ras-doc-mismatch-counts.txt")
    [comm] = report.communicators
    assert (comm.ident, comm.comm_hash, comm.size, comm.problems) == \
        ("#0-0", "27a079b828ff1a75", 32, ("MISMATCH",))
    behind = [g for g in comm.count_groups if g.operation == 6649]
    assert [(r.rank, r.pid, r.node, r.gpu) for r in behind[0].ranks][:2] == \
        [(0, 483072, "172.16.64.210", "0"), (2, 483074, "172.16.64.210", "2")]
    assert ranks_behind(report.counts()) == [0, 2, 3, 4, 5, 7]
    assert report.counts()[1] == 6650  # the 26 unlisted ranks: all the rest of the 32


def test_the_26_format_counts_per_collective_with_one_rank_behind_and_one_missing():
    report = ras("ras-2.26-constructed.txt")
    [comm] = report.communicators
    assert comm.problems == ("INCOMPLETE", "MISMATCH")
    assert [(r.rank, r.pid) for r in comm.missing_ranks] == [(3, 21731)]
    assert {g.collective for g in comm.count_groups} == {"AllGather", "AllReduce"}
    assert [(p.pid, p.node, p.gpus) for p in report.unresponsive] == [(21731, "10.0.0.11", "3")]
    assert report.timeouts == 1
    # rank 5 is one AllGather behind, rank 0 one AllReduce ahead; rank 3 gave no data
    assert ranks_behind(report.counts()) == [5, 1, 2, 4, 6, 7]
    assert 3 not in report.counts()


def test_a_status_mismatch_gives_no_counts():
    report = ras("ras-doc-mismatch-status.txt")
    assert [c.problems for c in report.communicators] == [("MISMATCH",)]
    assert report.counts() == {}


def test_the_documented_incomplete_and_dead_outputs_name_the_missing_rank_and_process():
    incomplete = ras("ras-doc-incomplete.txt")
    [comm] = incomplete.communicators
    assert (comm.missing, [r.rank for r in comm.missing_ranks], comm.size) == (1, [21], 32)
    assert [p.pid for p in incomplete.unresponsive] == [3487984] and incomplete.timeouts == 2
    dead = ras("ras-doc-dead.txt")
    assert [(p.pid, p.gpus) for p in dead.dead] == [(3487984, "5")] and dead.unresponsive == ()
    assert [r.rank for r in dead.communicators[0].missing_ranks] == [21]


def test_a_healthy_job_has_no_communicator_to_report():
    report = ras("ras-doc-normal.txt")
    assert (report.communicators, report.counts(), report.json) == ((), {}, False)


def test_the_json_output_gives_each_ranks_counts_and_the_missing_ranks():
    report = ras("ras-doc-json.json")
    [comm] = report.communicators
    assert (report.json, comm.size, comm.problems, comm.missing) == (True, 2, ("INCOMPLETE",), 1)
    assert [(r.rank, r.pid, r.node) for r in comm.missing_ranks] == [(1, 1524345, "172.16.64.245")]
    doc = json.loads((FIXTURES / "ras-doc-json.json").read_text())
    first = doc["communicators"][0]
    behind = {**first["ranks"][0], "rank": 1, "pid": 7,
              "collective_counts": {**first["ranks"][0]["collective_counts"], "AllReduce": 3}}
    first["ranks"][0]["collective_counts"]["AllReduce"] = 4
    first["ranks"].append(behind)
    report = parse_ras_status(json.dumps(doc))
    assert report is not None and report.counts() == {0: 4, 1: 3}
    assert ranks_behind(report.counts()) == [1]


@pytest.mark.parametrize("text", ["", "garbage\n", "Connection refused", "{", "[]", '{"a": 1}',
                                  '{"communicators": 3}'])
def test_what_is_no_ras_output_gives_none(text):
    assert parse_ras_status(text) is None


def test_a_cut_ras_reply_never_raises():
    text = (FIXTURES / "ras-2.26-constructed.txt").read_text()
    for cut in range(len(text)):
        report = parse_ras_status(text[:cut])
        assert report is None or isinstance(report.counts(), dict)


def test_a_real_nccl_timeout_dump_from_a_gpu_names_the_queued_all_reduce():
    """NCCL's own dump on its watchdog's timeout (an H200, torch 2.11.0+cu130, NCCL 2.28.9; made by
    tests/fixtures/gpu_broken/nccl_timeout.py): 80 all_reduces done, the 81st queued behind a
    kernel."""
    from fsdp_orch.observe.collective_counts import pending_collectives

    records = dumps("nccl-h200-timeout")
    record = records[0]
    assert (record.version, record.entries) == ("2.10", 81)
    default = record.groups["0"]
    assert (default.desc, default.last_enqueued, default.last_started, default.last_completed) == \
        ("default_pg", 81, -1, 80)
    assert (default.last_collective, default.waiting_in) == ("nccl:all_reduce", "nccl:all_reduce")
    assert pending_collectives(records) == {0: "nccl:all_reduce"}
    empty = parse_flight_recorder(
        (FIXTURES / "nccl-h200-timeout" / "empty_fr_trace_of_an_nccl_rank").read_bytes(), 0)
    assert empty is not None and empty.entries == 0 and pending_collectives({0: empty}) == {}

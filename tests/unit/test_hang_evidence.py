"""What a failure's evidence adds: the NCCL flight recorder's dumps, where the ranks wrote any."""

from __future__ import annotations

from fsdp_orch.backends.files import FileObservation
from fsdp_orch.observe.nccl_env import nccl_env_defaults
from fsdp_orch.supervise.diagnose import Diagnosis
from fsdp_orch.supervise.hang_evidence import with_flight_recorder


def test_a_failure_links_the_flight_recorder_dumps_at_the_path_the_launch_exported(tmp_path):
    timeout = Diagnosis("nccl_timeout", True, "Watchdog caught collective operation timeout", 3)
    attempt = FileObservation(tmp_path, 0, tmp_path)
    assert with_flight_recorder(timeout, attempt.flight_recorder_dumps()) == timeout
    prefix = nccl_env_defaults(str(tmp_path))["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
    for rank in (0, 1):  # stand-ins for what NCCL's watchdog writes on a timeout (no GPU here)
        (tmp_path / f"{prefix.rsplit('/', 1)[1]}{rank}").write_bytes(b"fake flight recorder dump")
    linked = with_flight_recorder(timeout, attempt.flight_recorder_dumps())
    assert linked.category == "nccl_timeout" and linked.line == 3
    assert linked.evidence == (f"Watchdog caught collective operation timeout; flight recorder "
                               f"dumps (2): {prefix}*")
    hang = Diagnosis("hang", True, "rank 1 stuck in train.py:9 main (not in a collective); stacks: /run/stacks")
    assert with_flight_recorder(hang, attempt.flight_recorder_dumps()).evidence == (
        f"rank 1 stuck in train.py:9 main (not in a collective); flight recorder dumps (2): {prefix}*; "
        "stacks: /run/stacks")

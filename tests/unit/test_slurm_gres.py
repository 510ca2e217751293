"""Each GPU's memory read from a SLURM partition's GRES, for ``fit``'s verdict where the profile
does not say it: the parser on ``sinfo -h -p PART -o %G`` output as real clusters print it (types
from gres.conf and from NVML's autodetection), and the SLURM kind asking through its runner, here
a fake ``sinfo`` (no SLURM cluster is started for this)."""

from __future__ import annotations

import pytest

from fsdp_orch.backends.slurm.gres import memory_of, partition_gpu_memory
from fsdp_orch.backends.slurm.kind import SlurmKind
from fsdp_orch.backends.slurm.profile import SlurmProfile
from fsdp_orch.fit.estimate import cluster_gpu_memory
from fsdp_orch.observe.command import CommandResult

MIB, GIB = 1 << 20, 1 << 30


@pytest.mark.parametrize("sinfo,mib", [
    ("gpu:h100:8(S:0-1)\n", 81559),
    ("gpu:nvidia_h100_80gb_hbm3:8(S:0-1)\n", 81559),
    ("gpu:h200:8(S:0-1),nvme:1\n", 143771),
    ("gpu:a100_80gb:4\n", 81920),
    ("gpu:nvidia_a100-sxm4-40gb:8(S:0-1)\n", 40960),
    ("gpu:tesla_v100-sxm2-32gb:8(S:0-1)\n(null)\n", 32510),  # and CPU-only nodes
    ("gpu:a10g:1\n", 23028),
    ("gpu:l40s:4(S:0),shard:16\n", 46068),
    ("gpu:nvidia_h100_nvl:2\n", 95830),
])
def test_a_known_gpu_type_gives_its_memory_and_says_where_it_came_from(sinfo, mib) -> None:
    memory, note = partition_gpu_memory(sinfo, "gpu")
    assert memory == mib * MIB, note
    assert "partition gpu's GRES" in note and "MiB" in note


@pytest.mark.parametrize("sinfo,why", [
    ("gpu:a100:4(S:0-1)\n", "comes in 40 GB or 80 GB"),
    ("gpu:v100:8\n", "comes in 16 GB or 32 GB"),
    ("gpu:8\n", "no type"),
    ("gpu:gh200:1\n", "unknown GPU type 'gh200'"),
    ("(null)\n", "no GPUs"),
    ("", "no GPUs"),
    ("gpu:a100_40gb:8(S:0-1)\ngpu:a100_80gb:8(S:0-1)\n", "GPUs differ (a100_40gb, a100_80gb)"),
])
def test_an_unknown_ambiguous_or_mixed_partition_gives_no_memory_and_says_why(sinfo, why) -> None:
    memory, note = partition_gpu_memory(sinfo, "gpu")
    assert memory is None and why in note, note


def test_a_size_in_an_unknown_types_name_is_taken_as_the_profiles_sizes_are() -> None:
    assert memory_of("nvidia_geforce_rtx_4090_24gb") == (24 * GIB, "24 GB, as its name says")
    assert memory_of("a10g")[0] == 23028 * MIB  # its "10g" is not a size


class FakeSinfo:
    """Stands in for SLURM's sinfo (no cluster runs for a unit test); records each argv."""

    def __init__(self, result: CommandResult):
        self.result, self.calls = result, []

    def __call__(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        self.calls.append(argv)
        return self.result


def slurm(**fields: object) -> SlurmProfile:
    return SlurmProfile.model_validate({"kind": "slurm", "partition": "gpu", "gpus_per_node": 8,
                                        **fields})


def test_the_slurm_kind_asks_sinfo_for_its_partition_only_where_nothing_else_says() -> None:
    sinfo = FakeSinfo(CommandResult(0, "gpu:h100:8(S:0-1)\n", ""))
    memory, note = cluster_gpu_memory(slurm(), None, sinfo)
    assert memory == 81559 * MIB and sinfo.calls == [["sinfo", "-h", "-p", "gpu", "-o", "%G"]]
    assert cluster_gpu_memory(slurm(gpu_memory="40GB"), None, sinfo) == (40 * GIB, None)
    assert cluster_gpu_memory(slurm(), 24 * GIB, sinfo) == (24 * GIB, None)
    assert len(sinfo.calls) == 1
    # a profile that asks for no GPUs runs on none: nothing asked, nothing said
    assert cluster_gpu_memory(slurm(gpus_per_node=0), None, sinfo) == (None, None)
    assert len(sinfo.calls) == 1


def test_sinfo_failing_gives_no_memory_and_its_message() -> None:
    sinfo = FakeSinfo(CommandResult(1, "", "slurm_load_partitions: Unable to contact slurm "
                                           "controller (connect failure)\n"))
    memory, note = SlurmKind().gpu_memory(slurm(), sinfo)
    assert memory is None
    assert note == ("no GPU memory from SLURM: sinfo -h -p gpu -o %G failed: "
                    "slurm_load_partitions: Unable to contact slurm controller (connect failure)")

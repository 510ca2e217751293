"""Planning around lost hosts (``PlanContext.excluded_hosts``) and elastic ``nodes: MIN-MAX``: the
SSH kind takes the first hosts not lost, as many as the range allows; the kinds that cannot go on
with fewer nodes refuse a range; a re-attaching supervisor finds the excluded hosts in the
events."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from planning import CONTEXT, plan_on, render

from fsdp_orch.backends.over_ssh.hosts import SshProfile
from fsdp_orch.backends.over_ssh.launcher import SshLauncher
from fsdp_orch.backends.registry import parse_profile
from fsdp_orch.backends.ssh import KIND as SSH
from fsdp_orch.jobspec.loading import load_job_text
from fsdp_orch.launch.submission import Submission
from fsdp_orch.places.builtin import builtin_dir
from fsdp_orch.record.events import EventWriter
from fsdp_orch.record.journal import Journal, read_status
from fsdp_orch.vocab.errors import InputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def hosts(n: int) -> SshProfile:
    return SshProfile.model_validate({"kind": "ssh", "device": "cpu", "procs_per_node": 2,
                                      "hosts": [
        {"address": f"10.0.0.{i}", "port": 22, "user": "train"} for i in range(1, n + 1)]})


def ssh_plan(nodes: str, profile: SshProfile, *excluded: str):  # type: ignore[no-untyped-def]
    job = load_job_text(f"name: demo\nscript: train.py\nnodes: {nodes}\n")
    return plan_on(job, profile, "ssh", replace(CONTEXT, excluded_hosts=excluded))


def where(p) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    return [(n.rank, f"{n.address}:{n.port}") for n in p.nodes]


def test_an_elastic_job_goes_on_with_the_hosts_that_are_left() -> None:
    full = ssh_plan("1-2", hosts(2))
    assert (full.nnodes, full.world_size, where(full)) == (
        2, 4, [(0, "10.0.0.1:22"), (1, "10.0.0.2:22")])
    shrunk = ssh_plan("1-2", hosts(2), "10.0.0.2:22")
    assert (shrunk.nnodes, shrunk.world_size, where(shrunk)) == (1, 2, [(0, "10.0.0.1:22")])
    scripts = {a.name: a.text for a in render(shrunk, search=[builtin_dir("templates")])}
    assert "node-1.sh" not in scripts and "--nnodes 1" in scripts["node-0.sh"]
    assert "10.0.0.2" not in scripts["hosts.txt"] and "10.0.0.2" not in scripts["node-0.sh"]


def test_the_first_host_lost_moves_rank_0_and_the_rendezvous_to_the_next() -> None:
    p = ssh_plan("1-2", hosts(2), "10.0.0.1:22")
    assert where(p) == [(0, "10.0.0.2:22")] and p.rdzv_host == "10.0.0.2"


def test_a_spare_host_replaces_a_lost_one_without_a_range() -> None:
    assert where(ssh_plan("2", hosts(3))) == [(0, "10.0.0.1:22"), (1, "10.0.0.2:22")]
    p = ssh_plan("2", hosts(3), "10.0.0.1:22")
    assert (p.nnodes, where(p)) == (2, [(0, "10.0.0.2:22"), (1, "10.0.0.3:22")])


def test_too_few_hosts_left_names_the_lost_ones_and_what_the_job_needs() -> None:
    with pytest.raises(InputError) as info:
        ssh_plan("2", hosts(2), "10.0.0.2:22")
    assert info.value.field == "nodes"
    assert ("has 1 of its 2 hosts left (10.0.0.2:22 lost); the job needs 2 (nodes: 2)"
            in str(info.value))
    with pytest.raises(InputError,
                       match=r"has 0 of its 2 hosts left \(10.0.0.2:22, 10.0.0.1:22 lost\); "
                             r"the job needs 1 \(nodes: 1-2\)"):
        ssh_plan("1-2", hosts(2), "10.0.0.2:22", "10.0.0.1:22")


def test_a_range_runs_on_as_many_hosts_as_are_listed_up_to_its_maximum() -> None:
    assert ssh_plan("1-4", hosts(2)).nnodes == 2
    assert ssh_plan("2-3", hosts(3)).nnodes == 3
    with pytest.raises(InputError, match="asks for 3-4 nodes but cluster 'ssh' lists 2 host"):
        ssh_plan("3-4", hosts(2))
    with pytest.raises(InputError, match="asks for 3 nodes but cluster 'ssh' lists 2 host"):
        ssh_plan("3", hosts(2))


@pytest.mark.parametrize(("kind", "extra", "expected"), [
    ("local", "", "is this one machine; expected nodes: 1, got 1-2"),
    ("slurm", "", "nodes: 1-2 is an elastic range, but a SLURM allocation keeps its node count"),
    ("tpu-vm", "launcher: xla\n",
     "nodes: 1-2 is an elastic range, but a TPU VM job runs on all 4 workers"),
])
def test_kinds_that_cannot_shrink_refuse_a_range(kind: str, extra: str, expected: str) -> None:
    job = load_job_text(f"name: demo\nscript: train.py\nnodes: 1-2\n{extra}")
    with pytest.raises(InputError) as info:
        plan_on(job, parse_profile(FIXTURES / "clusters" / f"{kind}.yaml"), kind)
    assert info.value.field == "nodes" and expected in str(info.value), str(info.value)
    fixed = load_job_text(f"name: demo\nscript: train.py\nnodes: 2-2\n{extra}")
    if kind == "slurm":  # MIN = MAX is a count
        assert plan_on(fixed, parse_profile(FIXTURES / "clusters" / "slurm.yaml"), kind).nnodes == 2


def test_a_reattached_supervisor_finds_each_node_on_its_host(tmp_path: Path) -> None:
    """The attempt's ref names each node's host: after a lost first host, node 0 is the second."""
    job = load_job_text("name: demo\nscript: train.py\nnodes: 1-2\n")
    sub = Submission(job_id="j", cluster="ssh", job=job, profile=hosts(2), job_dir=str(tmp_path),
                     run_root=str(tmp_path), kind=SSH)
    launcher = SshLauncher(sub)
    attempt = launcher.adopt(1, "ssh:0=4321@10.0.0.2:22")
    assert attempt.pgids == {0: 4321} and attempt.hosts[0].address == "10.0.0.2"
    assert attempt.ref == "ssh:0=4321@10.0.0.2:22" and attempt.lost_hosts() == ()
    attempt.lost_ranks.add(0)
    assert attempt.lost_hosts() == ("10.0.0.2:22",)
    old = launcher.adopt(0, "ssh:0=11,1=12")  # a ref written before refs named hosts
    assert ([h.address for h in old.hosts] == ["10.0.0.1", "10.0.0.2"]
            and old.pgids == {0: 11, 1: 12})


def test_excluded_hosts_are_rebuilt_from_the_events(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "j"
    Journal(EventWriter(run_dir, "submit"), "j").submitted(
        name="j", cluster="hosts", kind="ssh", spec_json="{}", run_dir=str(run_dir), job_file=None,
        spec_hash=None, idempotency_key=None)
    journal = Journal(EventWriter(run_dir, "supervisor"), "j")
    journal.start_attempt(0, resume_from=None)
    journal.host_excluded(attempt=0, host="10.0.0.2:22",
                          message="host 10.0.0.2:22 was lost in attempt 0")
    journal.restart_scheduled("restart 1 of 3", 1.0)
    # a second supervisor, after the first died
    later = Journal(EventWriter(run_dir, "supervisor"), "j")
    later.host_excluded(attempt=1, host="10.0.0.1:22", message="lost")
    later.host_excluded(attempt=1, host="10.0.0.2:22", message="lost again")
    view = read_status(str(run_dir), "j")
    assert view is not None and view.excluded_hosts == ["10.0.0.2:22", "10.0.0.1:22"]


# --- SLURM: spare nodes in the allocation --------------------------------------------------------

ALLOCATION = ("n1", "n2", "n3", "n4")  # as the launcher finds it: the supervisor's node first


def slurm_plan(job_text: str, *excluded: str, workers: tuple[str, ...] = ALLOCATION):  # type: ignore[no-untyped-def]
    job = load_job_text(f"name: demo\nscript: train.py\n{job_text}")
    profile = parse_profile(FIXTURES / "clusters" / "slurm.yaml")
    return plan_on(job, profile, "slurm",
                   replace(CONTEXT, excluded_hosts=excluded, workers=workers,
                           supervisor_command=("python", "-m", "fsdp_orch.supervise.supervisor")))


def test_spare_nodes_are_allocated_and_each_attempt_runs_on_the_first_healthy_ones() -> None:
    from fsdp_orch.backends.slurm.allocation import step_argv

    first = slurm_plan("nodes: 2\nspare_nodes: 2\n")
    assert (first.nnodes, first.spare_nodes, first.node_names) == (2, 2, ("n1", "n2"))
    sbatch = {a.name: a.text for a in render(first, search=[builtin_dir("templates")])}["sbatch.sh"]
    assert "#SBATCH --nodes=4\n" in sbatch
    later = slurm_plan("nodes: 2\nspare_nodes: 2\n", "n2")
    assert later.node_names == ("n1", "n3")
    argv = step_argv(later, "node.sh")
    assert "--nodelist=n1,n3" in argv and "--ntasks=2" in argv and "--nodes=2" in argv, argv
    # render, with no allocation known yet: the step takes the allocation's nodes as SLURM orders
    assert slurm_plan("nodes: 2\nspare_nodes: 1\n", workers=()).node_names == ()


def test_without_spares_the_step_takes_every_node_as_before() -> None:
    from fsdp_orch.backends.slurm.allocation import step_argv

    plain = slurm_plan("nodes: 2\n", workers=())
    assert (plain.spare_nodes, plain.node_names) == (0, ())
    assert not any(a.startswith(("--nodelist", "--ntasks=")) for a in step_argv(plain, "node.sh"))


def test_no_spare_left_or_the_supervisors_node_left_out_cannot_be_placed() -> None:
    with pytest.raises(InputError) as info:
        slurm_plan("nodes: 2\nspare_nodes: 1\n", "n2", "n3", workers=("n1", "n2", "n3"))
    assert info.value.field == "spare_nodes"
    assert "no spare node left in the allocation: n2, n3 left out, 1 healthy node(s) of 3" in str(
        info.value) and "needs 2" in str(info.value), str(info.value)
    with pytest.raises(InputError) as info:
        slurm_plan("nodes: 2\nspare_nodes: 1\n", "n1", workers=("n1", "n2", "n3"))
    assert "the supervisor's own node n1 is among them" in str(info.value)


def test_spare_nodes_come_from_the_profile_unless_the_job_says() -> None:
    job = load_job_text("name: demo\nscript: train.py\nnodes: 2\n")
    data = parse_profile(FIXTURES / "clusters" / "slurm.yaml").model_dump()
    profile = type(parse_profile(FIXTURES / "clusters" / "slurm.yaml")).model_validate(
        {**data, "spare_nodes": 1})
    assert plan_on(job, profile, "slurm", replace(
        CONTEXT, supervisor_command=("python",))).spare_nodes == 1
    own = load_job_text("name: demo\nscript: train.py\nnodes: 2\nspare_nodes: 0\n")
    assert plan_on(own, profile, "slurm", replace(
        CONTEXT, supervisor_command=("python",))).spare_nodes == 0


def test_spare_nodes_on_a_kind_without_an_allocation_is_refused_by_name() -> None:
    job = load_job_text("name: demo\nscript: train.py\nspare_nodes: 1\n")
    with pytest.raises(InputError) as info:
        plan_on(job, parse_profile(FIXTURES / "clusters" / "local.yaml"), "local")
    assert info.value.field == "spare_nodes" and "spare_nodes is for SLURM allocations" in str(
        info.value), str(info.value)

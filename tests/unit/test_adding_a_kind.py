"""The docs' "Adding a cluster kind" (docs/contributing-layout.md), walked with a throwaway kind:
its profile model, ``place()``, a main template, ``artifacts()``, registered through the registry
alone; a
profile for it in the project's ``clusters/``; then a job rendered with it the way ``fsdp-orch
render`` does (``plan_job``) and through the CLI itself, in-process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from pydantic import Field

from fsdp_orch.backends.base import ClusterKind
from fsdp_orch.backends.registry import (
    KINDS,
    cluster_kind,
    kind_names,
    load_profile,
    register,
    registered,
    unregister,
)
from fsdp_orch.cli import main as cli
from fsdp_orch.control.planning import plan_job
from fsdp_orch.jobspec.profiles import ProfileBase
from fsdp_orch.jobspec.schema import JobSpec
from fsdp_orch.launch.plan import LaunchPlan
from fsdp_orch.launch.plan_inputs import Placement, PlanContext
from fsdp_orch.launch.render import Artifact, Templates
from fsdp_orch.launch.submission import PlannedAttempt, Submission
from fsdp_orch.record.index import JobIndex
from fsdp_orch.vocab.errors import FsdpOrchError, InputError

NODE_SCRIPT = "toy-node.sh"


# Step 1: the kind. Its profile model (a Literal kind), place(), main template and artifacts().
class ToyProfile(ProfileBase):
    kind: Literal["toy"]
    queue: str = Field(min_length=1)
    hosts: int = Field(gt=0)
    procs_per_node: int = Field(default=1, gt=0)
    launchers: ClassVar[tuple[str, ...]] = ("torchrun", "python")

    def default_procs_per_node(self) -> int:
        return self.procs_per_node


class ToyKind(ClusterKind[ToyProfile]):
    name = "toy"
    profile_model = ToyProfile
    main_template = "toy-node.sh.j2"  # in the project's templates/ (step 4)

    def place(self, job: JobSpec, profile: ToyProfile, cluster: str, ctx: PlanContext) -> Placement:
        # ToyProfile's own fields, no isinstance: the kind is generic in its profile
        if job.nodes > profile.hosts:
            raise InputError(f"cluster {cluster!r} has {profile.hosts} hosts; the job asks "
                             f"for {job.nodes}",
                             field="nodes")
        return Placement(nnodes=job.nodes,
                         nproc_per_node=job.procs_per_node or profile.default_procs_per_node(),
                         device="cpu", rdzv_host="toy-0")

    def artifacts(self, plan: LaunchPlan, templates: Templates) -> list[Artifact]:
        profile = self.profile_of(plan)  # the plan holds any kind's profile: narrowed, checked
        return [Artifact(f"{plan.attempt_dir}/{NODE_SCRIPT}",
                         templates(templates.main, queue=profile.queue), True)]

    # The doing: rendering never reaches it.
    def attempt_launcher(self, submission: Submission) -> Any:
        raise NotImplementedError

    def start(self, index: JobIndex, submission: Submission, first: PlannedAttempt) -> None:
        raise NotImplementedError

    def cancel(self, index: JobIndex, row: Any) -> str:
        raise NotImplementedError

    def refresh(self, index: JobIndex, rows: Any) -> list[str]:
        return []


KIND = ToyKind()  # what a module path registered for the kind must hold

# Step 4: its main template, built on the shared pieces every built-in node script uses.
NODE_TEMPLATE = """\
{% set what = "the script every toy node runs" %}
{% include "_preamble.sh.j2" %}
# queue {{ queue | oneline }}
NODE_RANK="${TOY_RANK:-0}"
RDZV_HOST={{ plan.rdzv_host | q }}
{% include "_node_body.sh.j2" %}
"""

# Step 3: its profile, in the project's clusters/.
PROFILE = """\
kind: toy
description: a kind added through the registry alone
python: /opt/toy/bin/python
queue: toy-queue
hosts: 4
procs_per_node: 2
"""

JOB = "name: toy run\nscript: train.py\nnodes: 3\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder (the cwd) with the kind's template and profile and a job; an empty home."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FSDP_ORCH_HOME", str(tmp_path / "home"))
    for name, text in {"templates/toy-node.sh.j2": NODE_TEMPLATE, "clusters/toybox.yaml": PROFILE,
                       "job.yaml": JOB}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.fixture
def toy(project: Path) -> Iterator[Path]:
    """Step 2: the kind's name in the registry, for this test only."""
    with registered("toy", KIND):
        assert kind_names() == (*KINDS, "toy")
        yield project
    assert kind_names() == KINDS


def node_script(artifacts: list[Artifact]) -> str:
    (text,) = [a.text for a in artifacts if a.name == NODE_SCRIPT]
    return text


def check_node_script(text: str) -> None:
    lines = text.splitlines()
    # the job's nodes
    assert "# 3 node(s) x 2 process(es) = world size 6; launcher torchrun" in lines
    # the launcher, the profile's python
    assert "exec /opt/toy/bin/python -u -m torch.distributed.run \\" in lines
    assert "  --nnodes 3 \\" in lines and "  --nproc-per-node 2 \\" in lines
    assert "# queue toy-queue" in lines  # a value of the profile, through artifacts()
    assert "RDZV_HOST=toy-0" in lines  # place()'s rendezvous host
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_a_kind_added_through_the_registry_renders_a_job(toy: Path) -> None:
    profile, ref = load_profile("toybox")
    assert isinstance(profile, ToyProfile) and ref.origin == "project"
    planned = plan_job(toy / "job.yaml", "toybox", job_id="j1")
    assert planned.submission.kind is KIND
    assert (planned.plan.nnodes, planned.plan.nproc_per_node, planned.plan.world_size) == (3, 2, 6)
    assert [a.name for a in planned.artifacts] == ["job.json", NODE_SCRIPT]
    check_node_script(node_script(planned.artifacts))


def test_the_cli_renders_with_the_registered_kind(toy: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", "job.yaml", "--cluster", "toybox", "--job-id", "j1"]) == 0
    printed = capsys.readouterr().out
    header = f"==> {toy / 'home' / 'runs' / 'j1' / 'attempt-0' / NODE_SCRIPT} <=="
    assert header in printed.splitlines()
    check_node_script(printed.split(header + "\n", 1)[1].split("\n==> ", 1)[0])


def test_the_kinds_place_refuses_what_the_cluster_cannot_run(toy: Path) -> None:
    with pytest.raises(InputError) as caught:
        plan_job(toy / "job.yaml", "toybox", overrides=["nodes=5"])
    assert caught.value.field == "nodes" and "has 4 hosts; the job asks for 5" in str(caught.value)


def test_a_profile_template_replaces_the_kinds_main_template(toy: Path) -> None:
    (toy / "clusters" / "mine.sh.j2").write_text("# mine: {{ plan.nnodes }} nodes, queue "
                                                 "{{ queue }}\n")
    (toy / "clusters" / "toybox.yaml").write_text(PROFILE + "template: mine.sh.j2\n")
    planned = plan_job(toy / "job.yaml", "toybox")
    assert node_script(planned.artifacts) == "# mine: 3 nodes, queue toy-queue\n"


def test_a_kind_registered_by_module_path_is_imported_when_met(project: Path) -> None:
    with registered("toy", __name__):  # this module: its KIND
        assert cluster_kind("toy") is KIND
        check_node_script(node_script(plan_job(project / "job.yaml", "toybox").artifacts))


def test_unregistered_the_kind_is_unknown_again(project: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    register("toy", KIND)
    unregister("toy")
    with pytest.raises(InputError, match="unknown cluster kind 'toy'"):
        cluster_kind("toy")
    assert cli.main(["render", "job.yaml", "--cluster", "toybox"]) == 2
    err = capsys.readouterr().err
    assert "expected one of local, slurm, ssh, tpu-vm, kubernetes; got 'toy'" in err


def test_the_registry_refuses_a_taken_name_a_wrong_name_and_a_builtin(project: Path) -> None:
    with registered("toy", KIND):
        with pytest.raises(ValueError, match="already registered"):
            register("toy", KIND)
    with pytest.raises(ValueError, match="already registered"):
        register("slurm", KIND)
    with pytest.raises(ValueError, match="registered as 'toy2'"):
        register("toy2", KIND)
    with pytest.raises(ValueError, match="built in"):
        unregister("local")
    with pytest.raises(ValueError, match="not registered"):
        unregister("toy")
    assert kind_names() == KINDS


def test_a_kind_given_another_kinds_profile_says_so(project: Path) -> None:
    plan = plan_job(project / "job.yaml", "local", overrides=["nodes=1"]).plan
    with pytest.raises(FsdpOrchError,
                       match=r"cluster kind 'toy' was given a profile of kind 'local' "
                             r"\(LocalProfile\); expected a ToyProfile"):
        KIND.profile_of(plan)

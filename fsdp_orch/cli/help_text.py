"""What ``fsdp-orch COMMAND --help`` shows besides the options: what the command is for, and
examples that work as written from a checkout (``examples/demo``)."""

from __future__ import annotations

ENVIRONMENT = """environment:
  FSDP_ORCH_HOME    where jobs are kept (default ~/.fsdp-orch); must be yours and private
  FSDP_ORCH_FAULT   faults to inject, for chaos tests, ';' between them:
                    KIND:step=N:rank=R[:attempt=K] or KIND:after=S:rank=R[:attempt=K]
                    (S seconds after the attempt's first step), KIND one of hang, crash,
                    kill, collective_timeout, checkpoint_crash, slow (with :seconds=S);
                    e.g. --set env.FSDP_ORCH_FAULT=hang:step=120:rank=1

JOB_ID: a job's id, or the start of one that names a single job.
Docs: docs/ in the repository (mkdocs serve); README.md first."""

EXAMPLES = {
    "render": "fsdp-orch render --cluster local examples/demo/job.yaml\n"
              "fsdp-orch render --cluster slurm --set nodes=4 job.yaml --out /tmp/rendered",
    "submit": "fsdp-orch submit --cluster local --wait examples/demo/job.yaml\n"
              "fsdp-orch submit --cluster slurm --set nodes=2 --set 'args=[--steps, \"500\"]' "
              "job.yaml\n"
              "fsdp-orch submit --cluster local --wait --fresh \\\n"
              "    --set env.FSDP_ORCH_FAULT=hang:step=120:rank=1 examples/demo/job.yaml",
    "status": "fsdp-orch status\nfsdp-orch status 3f2a --json",
    "logs": "fsdp-orch logs 3f2a\nfsdp-orch logs 3f2a --attempt 1",
    "events": "fsdp-orch events 3f2a\nfsdp-orch events 3f2a --follow",
    "report": "fsdp-orch report 3f2a --out report.html",
    "metrics": "fsdp-orch metrics --serve 9464   # http://127.0.0.1:9464/metrics\n"
               "fsdp-orch metrics --textfile /var/lib/prometheus/node-exporter --every 30",
    "cancel": "fsdp-orch cancel 3f2a",
    "diagnose": "fsdp-orch diagnose slurm-1234.out",
    "doctor": "fsdp-orch doctor\nfsdp-orch doctor --cluster slurm",
    "clusters": "fsdp-orch clusters",
    "schema": "fsdp-orch schema job > job.schema.json   "
              "# then, first line of job.yaml:\n"
              "# yaml-language-server: $schema=./job.schema.json",
}


def epilog(name: str | None) -> str:
    examples = EXAMPLES.get(name or "")
    shown = ("examples:\n" + "\n".join(f"  {line}" for line in examples.splitlines()) + "\n\n"
             if examples else "")
    return shown + ENVIRONMENT

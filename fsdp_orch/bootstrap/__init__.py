"""What every rank's Python loads with no change to the training script.

The launch scripts put ``bootstrap/site`` first on ``PYTHONPATH``; its ``sitecustomize`` installs
:mod:`fsdp_orch.bootstrap.agent` in every Python process of the job. The agent stays passive (no
torch import, no thread) until the process starts a process group or takes an optimizer step; from
then on it writes the rank's heartbeat file: the step count (torch's global optimizer-step hook),
and when the main thread last ran Python (a pending-call probe), so the supervisor can tell a rank
stuck in one native call from one busy in Python. It also applies ``FSDP_ORCH_FAULT`` at optimizer
steps.

Everything here is standard library only, and cheap to import.
"""

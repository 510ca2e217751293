"""The submit request: the rules for combining submit's options, written once, in the words of the
command line or of the Python API."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_orch.control.submit_request import API_WORDS, CLI_WORDS, SubmitRequest
from fsdp_orch.vocab.errors import InputError

# (rule, the CLI's flags, the API's arguments, the CLI's message, the API's message)
RULES = [
    ("timeout-without-wait", ["--timeout", "10"], {"timeout": 10},
     "--timeout: only with --wait (how long to wait for the job to end)",
     "timeout: only with wait=True (how long to wait for the job to end)"),
    ("blank-key", ["--idempotency-key", "  "], {"idempotency_key": "  "},
     "--idempotency-key: expected a non-empty key; got '  '",
     "idempotency_key: expected a non-empty key, or None"),
    ("empty-key", ["--idempotency-key", ""], {"idempotency_key": ""},
     "--idempotency-key: expected a non-empty key; got ''",
     "idempotency_key: expected a non-empty key, or None"),
    ("empty-init-from", ["--init-from", ""], {"init_from": ""},
     "--init-from: expected a job id or a checkpoint path; got '' (leave it out for a cold start)",
     "init_from: expected a job id or a checkpoint path; got '' (leave it out for a cold start)"),
    ("init-optimizer-alone", ["--init-optimizer"], {"init_optimizer": True},
     "--init-optimizer: only with --init-from (the checkpoint whose optimizer state to take)",
     "init_optimizer: only with init_from (the checkpoint whose optimizer state to take)"),
    ("resume-and-fresh", ["--resume", "--fresh"], {"resume": True, "fresh": True},
     "--resume/--fresh: expected one of --resume (continue the checkpoint there) or --fresh "
     "(move it aside and start over), not both",
     "resume/fresh: expected one of resume=True or fresh=True, not both"),
]
IDS = [rule[0] for rule in RULES]


@pytest.mark.parametrize(("rule", "flags", "kwargs", "cli_says", "api_says"), RULES, ids=IDS)
def test_the_rules_are_the_requests(rule, flags, kwargs, cli_says, api_says):
    """Each surface's error is the one the request raises in that surface's words."""
    for words, says in ((CLI_WORDS, cli_says), (API_WORDS, api_says)):
        with pytest.raises(InputError) as raised:
            SubmitRequest(Path("job.yaml"), "local", words=words, **kwargs)
        assert str(raised.value) == says


def test_a_request_holds_what_was_asked():
    request = SubmitRequest(Path("job.yaml"), "slurm", ("nodes=2",), wait=True, timeout="1h30m",
                            fresh=True)
    assert request.wait_s == 5400.0 and request.checkpoint_choice == "fresh"
    assert not request.checkpoint_per_job
    assert SubmitRequest(Path("j"), "c", wait=True, timeout=2.5, words=API_WORDS).wait_s == 2.5
    scheduled = SubmitRequest(Path("j"), "c", idempotency_key="k", origin={"schedule": "s"})
    assert scheduled.checkpoint_per_job and scheduled.checkpoint_choice is None
    with pytest.raises(InputError, match="expected a duration"):
        SubmitRequest(Path("j"), "c", wait=True, timeout="soon")

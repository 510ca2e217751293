"""Names of what an attempt leaves in its folder besides the logs. Torch-free, stdlib-free."""

STACKS_DIR = "stacks"  # every rank's Python stack, dumped when the attempt was judged hung
RANKS_FILE = "ranks.json"  # {"nodes": {rank: node rank}}: where each rank ran (logs --rank)
# Written by the supervisor when it judges the attempt hung: each rank's bootstrap answers with its
# flight recorder's dump (torch's ``_dump_fr_trace``; gloo writes none on
# its own) at the dump prefix.
FLIGHT_RECORDER_REQUEST = "flight-recorder.request"


def pyspy_dump_name(rank: int) -> str:
    return f"rank-{rank}.txt"


def faulthandler_dump_name(rank: int) -> str:
    """Where a rank's bootstrap makes ``kill -USR1`` write its stacks (py-spy's fallback)."""
    return f"rank-{rank}.faulthandler.txt"

# torchrun's per-rank files and the per-node console logs, relative to the attempt's folder.
LOG_PATTERNS = ("node-*/*/attempt_*/*/stderr.log", "node-*/*/attempt_*/*/stdout.log",
                "console-node-*.log")

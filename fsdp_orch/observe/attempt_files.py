"""Names of what an attempt leaves in its folder besides the logs. Torch-free, stdlib-free."""

STACKS_DIR = "stacks"  # every rank's Python stack, dumped when the attempt was judged hung


def pyspy_dump_name(rank: int) -> str:
    return f"rank-{rank}.txt"


def faulthandler_dump_name(rank: int) -> str:
    """Where a rank's bootstrap makes ``kill -USR1`` write its stacks (py-spy's fallback)."""
    return f"rank-{rank}.faulthandler.txt"

# torchrun's per-rank files and the per-node console logs, relative to the attempt's folder.
LOG_PATTERNS = ("node-*/*/attempt_*/*/stderr.log", "node-*/*/attempt_*/*/stdout.log", "console-node-*.log")

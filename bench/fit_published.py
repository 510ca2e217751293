"""``fsdp-orch fit`` against every published peak of ``tests/fixtures/fit/published/figures.json``
(Answer.AI's fsdp_qlora, torchtune's README, torchtitan's Llama 3.1 8B benchmark; sources and the
line each was read from in ``FIGURES.md`` beside it): each figure's job file as a user would write
it (``tests/fit_published.py``), its estimate in the statistic the source reports, the error, and
the measurement's time. Target (issue 63): at least 80% of the held-out figures within 15%.
A fresh cache each run (a temporary ``FSDP_ORCH_HOME``), so the times are cold.

    .venv/bin/python bench/fit_published.py [FIGURE_ID ...]
    .venv/bin/python bench/fit_published.py --held    # the 17 held to a tolerance: exit 1 past one
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fit_published import main  # noqa: E402

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as home:
        os.environ["FSDP_ORCH_HOME"] = home
        sys.exit(main(sys.argv[1:]))

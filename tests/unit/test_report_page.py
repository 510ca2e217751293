"""The report page, rendered from a hand-built job: user words escaped, nothing fetched, the figures
those of ``status --json``, and no torch imported on the way."""

from __future__ import annotations

import re
import subprocess
import sys

from fsdp_orch.record import event_types
from fsdp_orch.record.fold import fold
from fsdp_orch.report.page import render

T0 = 1_700_000_000.0
NASTY = "<script>alert('x')</script> & \"quoted\""


def events() -> list[event_types.Event]:
    return [event_types.Submitted(at=T0, job="j", name=NASTY, cluster="local", run_dir="/r/<b>"),
            event_types.AttemptStarted(at=T0 + 1, attempt=0),
            event_types.FirstStep(at=T0 + 3, attempt=0, first_step_at=T0 + 3),
            event_types.Progress(at=T0 + 3, step=1, loss=4.0, progress_at=T0 + 3),
            event_types.CheckpointCommitted(at=T0 + 8, step=5, path="/ck/step-5"),
            event_types.Progress(at=T0 + 10, step=9, loss=3.0, progress_at=T0 + 10),
            event_types.FailureDetected(at=T0 + 20, attempt=0, category="hang", action="restart",
                                        stalled_for_s=10.0,
                                  evidence=f"rank 1 </td><img src=http://x/y.png> {NASTY}",
                                        hint=NASTY),
            event_types.AttemptEnded(at=T0 + 21, attempt=0, exit_code=-9),
            event_types.RestartScheduled(at=T0 + 21, delay=1.0),
            event_types.AttemptStarted(at=T0 + 22, attempt=1, resume_from="/ck/step-5",
                                       resume_step=5),
            event_types.FirstStep(at=T0 + 24, attempt=1, first_step_at=T0 + 24),
            event_types.Progress(at=T0 + 24, step=6, loss=3.5, progress_at=T0 + 24),
            event_types.Progress(at=T0 + 34, step=20, loss=2.0, progress_at=T0 + 34),
            event_types.AttemptEnded(at=T0 + 35, attempt=1, exit_code=0),
            event_types.Finished(at=T0 + 36, state="SUCCEEDED")]


def page() -> tuple[str, dict]:
    status = fold(events(), "j")
    assert status is not None
    return render(status, events()), status.to_json()["goodput"]


def test_user_words_are_escaped_and_nothing_is_fetched() -> None:
    html, _ = page()
    assert ("<script" not in html and "<img" not in html and "url(" not in html
            and "@import" not in html)
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;quoted&quot;" in html
    assert not re.search(r"<[^>]*\s(src|href|srcset)\s*=",
                         html), "no tag refers to anything outside the page"
    assert html.count("class='failure'") == 1 and html.count('class="checkpoint"') == 1


def test_the_figures_are_status_jsons() -> None:
    html, g = page()
    for bucket in g["seconds"]:
        assert (f"data-bucket='{bucket}' data-seconds='{g['seconds'][bucket]!r}' "
                f"data-percent='{g['percent'][bucket]!r}'") in html
    assert g["seconds"]["detection"] == 10 and g["seconds"]["lost_work"] > 0
    assert f"goodput {g['goodput_pct']:.1f}%" in html
    assert html.count('class="loss-line"') == 2, "one loss line per attempt"
    assert html.count('class="gap"') == 1 and html.count('class="attempt"') == 2


def test_rendering_the_page_imports_no_torch() -> None:
    code = ("import sys; import fsdp_orch.cli.main; from tests.unit.test_report_page import "
            "page; page(); assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_notices_are_on_the_page_escaped() -> None:
    """A teardown hang after the last step (issue 43) is no failure, but the page says it."""
    teardown = event_types.Notice(at=T0 + 35, attempt=1, notice="teardown_hang",
                                  message=f"rank 1 stuck at <module> at sft.py:145 {NASTY}")
    status = fold([*events()[:-1], teardown, events()[-1]], "j")
    assert status is not None
    html = render(status, events())
    assert html.count("class='notice' data-kind='teardown_hang'") == 1
    assert "rank 1 stuck at &lt;module&gt; at sft.py:145" in html and "<script" not in html
    assert "<h2>Notices</h2>\n<p>none</p>" in page()[0]


def test_each_attempt_has_a_row_and_each_loss_point_a_mark_with_labelled_axes() -> None:
    """Issue 44: a per-attempt table (start, end, steps, the checkpoint resumed, how it ended),
    every loss point logged, the loss curve's axes titled, the drawings as wide as the page, and
    attempts drawn in colours no other meaning uses."""
    from fsdp_orch.report.svg import ATTEMPT_COLORS, COLORS

    html, _ = page()
    rows = re.findall(r"<tr class='attempt' data-attempt='(\d)' data-last-step='(\d*)'>(.*?)</tr>",
                      html)
    assert [(a, last) for a, last, _ in rows] == [("0", "9"), ("1", "20")]
    first, second = rows[0][2], rows[1][2]
    assert "0 to 9" in first and "hang -&gt; restart" in first
    assert "5 to 20" in second and "/ck/step-5" in second and "exit 0" in second
    assert html.count('class="loss-point"') == 4  # every progress event's loss
    assert "attempt 1, step 20: loss 2" in html
    assert html.count('class="axis-title"') == 2 and ">loss</text>" in html
    assert 'width="100%" style="max-width:960px;height:auto"' in html
    assert not set(ATTEMPT_COLORS) & set(COLORS.values())

"""The pure parts of hack/demo (shared with tests/e2e): SLO attainment, the schedule, the live table."""

from __future__ import annotations

import io

import pytest

from demo.live import LiveTable, Row, format_row
from demo.run import rate_at
from demo.traffic import PhaseStats, Slo
from vllm_emulator.loadgen import RequestRecord

SLO = Slo(ttft_ms=500, itl_ms=24)


def _done(ttft_ms: float, itl_ms: float | None, tokens: int = 64) -> RequestRecord:
    return RequestRecord(
        target="http://127.0.0.1:1",
        sent_at=0.0,
        ttft_s=ttft_ms / 1000,
        itl_s=None if itl_ms is None else itl_ms / 1000,
        e2e_s=1.0,
        output_tokens=tokens,
    )


def test_attainment_counts_a_request_only_when_it_met_both_targets() -> None:
    records = [
        _done(100, 20),  # both met
        _done(500, 24),  # on the targets: met
        _done(501, 20),  # TTFT missed
        _done(100, 24.5),  # ITL missed
        _done(100, None, tokens=1),  # one token: no gap to miss
        RequestRecord(target="http://127.0.0.1:1", sent_at=0.0, error="timeout"),
        RequestRecord(target="http://127.0.0.1:1", sent_at=0.0, error="unfinished"),
    ]
    stats = PhaseStats.of(records, SLO, unserved=3)
    assert stats.requests == 10
    assert stats.completed == 5
    assert stats.failed == 5
    assert (stats.ttft_met, stats.itl_met, stats.both_met) == (4, 4, 3)
    assert stats.attainment == pytest.approx(0.3)
    assert stats.errors == {"no_serving_pod": 3, "timeout": 1, "unfinished": 1}
    assert stats.ttft_p50_ms == pytest.approx(100)
    assert stats.itl_mean_ms == pytest.approx((20 + 24 + 20 + 24.5) / 4)


def test_no_requests_means_no_attainment() -> None:
    stats = PhaseStats.of([], SLO)
    assert stats.requests == 0
    assert stats.attainment is None
    assert stats.describe() == "no requests"


def test_schedule_steps_scale_and_end() -> None:
    schedule = ((45.0, 60.0), (60.0, 250.0))
    assert rate_at(schedule, 0.0, 1.0) == 60.0
    assert rate_at(schedule, 44.9, 1.0) == 60.0
    assert rate_at(schedule, 45.0, 1.0) == 250.0
    assert rate_at(schedule, 105.0, 1.0) is None
    assert rate_at(schedule, 89.0, 2.0) == 60.0  # stretched: the first step lasts 90 s
    assert rate_at(schedule, 90.0, 2.0) == 250.0
    assert rate_at(schedule, 210.0, 2.0) is None


def _row(**changes: object) -> Row:
    values: dict[str, object] = {
        "variant": "vllme-deployment",
        "model": "default/default",
        "accelerator": "A100",
        "mode": "metrics",
        "offered_rpm": 250.0,
        "observed_rpm": 236.4,
        "replicas": 2,
        "serving": 2,
        "desired": 3,
        "ttft_predicted": 127.0,
        "ttft_measured": None,
        "itl_predicted": 21.7,
        "itl_measured": 22.24,
        "slo_ttft": 500.0,
        "slo_itl": 24.0,
        "attainment": 0.314,
    }
    values.update(changes)
    return Row(**values)  # type: ignore[arg-type]


def test_a_row_shows_missing_values_as_dashes_and_unserved_pods_with_a_star() -> None:
    line = format_row(_row(serving=1))
    assert "250 / 236" in line
    assert "2/3*" in line
    assert "127 / -" in line
    assert "21.7 / 22.2" in line
    assert line.rstrip().endswith("31%")
    assert "2/3*" not in format_row(_row())


def test_the_table_redraws_in_place_on_a_terminal_and_appends_lines_otherwise() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    table = LiveTable(screen)
    table.show("t=1", [_row()], ["footer"])
    first = screen.getvalue()
    assert first.startswith("\x1b[2Kt=1\n")  # nothing to go back over yet: clear the line, write
    table.show("t=2", [_row()], ["footer"])
    second = screen.getvalue()[len(first) :]
    assert second.startswith(f"\x1b[{first.count(chr(10))}F")  # back to the first line, then redraw
    assert "t=2" in second

    log = io.StringIO()
    plain = LiveTable(log)
    plain.show("t=1", [_row()])
    plain.show("t=2", [_row()])
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in log.getvalue()
    assert lines[1].startswith("t=2 | vllme-deployment: 250 req/min, 2/3 replicas")

"""The live view: one row per variant, redrawn in place (or appended, when the output is not a terminal)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

__all__ = ["LiveTable", "Row"]


@dataclass(frozen=True)
class Row:
    """What the table shows for one variant at one moment; None is shown as ``-``."""

    variant: str
    model: str
    accelerator: str
    mode: str
    offered_rpm: float
    observed_rpm: float | None
    replicas: int | None
    serving: int
    desired: int | None
    ttft_predicted: float | None
    ttft_measured: float | None
    itl_predicted: float | None
    itl_measured: float | None
    slo_ttft: float
    slo_itl: float
    attainment: float | None


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _i(value: int | None) -> str:
    return "-" if value is None else str(value)


_HEADER = (
    f"{'variant':<18} {'model':<16} {'acc':<7} {'mode':<7} "
    f"{'load req/min':>13} {'replicas':>10} {'TTFT ms':>15} {'ITL ms':>13} {'SLO met':>8}"
)
_SUBHEADER = (
    f"{'':<18} {'':<16} {'':<7} {'':<7} "
    f"{'sent / seen':>13} {'now/wanted':>10} {'pred / meas':>15} {'pred / meas':>13} {'(20 s)':>8}"
)


def format_row(row: Row) -> str:
    load = f"{_f(row.offered_rpm)} / {_f(row.observed_rpm)}"
    replicas = f"{_i(row.replicas)}/{_i(row.desired)}"
    if row.serving != (row.replicas or 0):
        replicas = f"{replicas}*"
    ttft = f"{_f(row.ttft_predicted)} / {_f(row.ttft_measured)}"
    itl = f"{_f(row.itl_predicted, 1)} / {_f(row.itl_measured, 1)}"
    met = "-" if row.attainment is None else f"{100 * row.attainment:.0f}%"
    return (
        f"{row.variant[:18]:<18} {row.model[:16]:<16} {row.accelerator[:7]:<7} {row.mode[:7]:<7} "
        f"{load:>13} {replicas:>10} {ttft:>15} {itl:>13} {met:>8}"
    )


class LiveTable:
    """Redraws a block of lines in place on a terminal; appends a compact line per refresh otherwise."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self._drawn = 0

    def show(self, title: str, rows: Sequence[Row], footer: Sequence[str] = ()) -> None:
        if not self.tty:
            parts = [
                f"{r.variant}: {r.offered_rpm:.0f} req/min, {_i(r.replicas)}/{_i(r.desired)} replicas, "
                f"TTFT {_f(r.ttft_predicted)}/{_f(r.ttft_measured)} ms"
                for r in rows
            ]
            print(f"{title} | " + " | ".join(parts), file=self.stream, flush=True)
            return
        lines = [title, "", _HEADER, _SUBHEADER, *(format_row(r) for r in rows), "", *footer]
        out = []
        if self._drawn:
            out.append(f"\x1b[{self._drawn}F")  # back to the first line drawn last time
        out.extend(f"\x1b[2K{line}\n" for line in lines)  # clear each line, then write it
        if len(lines) < self._drawn:
            out.extend("\x1b[2K\n" for _ in range(self._drawn - len(lines)))
            out.append(f"\x1b[{self._drawn - len(lines)}F")
        self.stream.write("".join(out))
        self.stream.flush()
        self._drawn = len(lines)

"""Progress outside a terminal: plain lines per case and engine, at most every 10 % or 30 s, never silent."""

from __future__ import annotations

import io
from dataclasses import dataclass

from speceq.pipeline.collect.progress import LineProgress, NoProgress, make_progress


@dataclass(frozen=True)
class _Case:
    case_id: str


@dataclass(frozen=True)
class _Chunk:
    role: str
    case: _Case
    slice_index: int

    def label(self) -> str:
        return f"{self.role} · {self.case.case_id} · slice {self.slice_index}"


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def chunks(role: str, case: str, n: int) -> list[_Chunk]:
    return [_Chunk(role, _Case(case), i) for i in range(n)]


def test_lines_every_tenth_per_case_and_engine_and_a_last_line_at_100_percent():
    many, few = chunks("baseline", "a", 40), chunks("candidate", "b", 3)
    out, clock = io.StringIO(), _Clock()
    with LineProgress(many + few, [], out, clock=clock, heartbeat=False) as p:
        for c in many:
            clock.t += 0.5
            p.started(c)
            p.finished(c)
        for c in few:
            p.finished(c)
    lines = out.getvalue().splitlines()
    a = [line for line in lines if "baseline · a" in line]
    assert len(a) == 10 and a[0] == "speceq: baseline · a: 4/40 chunks (10 %), 2 s"
    assert a[-1].startswith("speceq: baseline · a: 40/40 chunks (100 %)")
    assert [line.split(": ")[2].split(" (")[0] for line in lines if "candidate" in line] == \
        ["1/3 chunks", "2/3 chunks", "3/3 chunks"]


def test_reused_chunks_count_and_a_slow_chunk_gets_a_line_after_30_s():
    todo = chunks("baseline", "a", 100)
    out, clock = io.StringIO(), _Clock()
    p = LineProgress(todo, todo[:50], out, clock=clock, heartbeat=False)
    p.started(todo[50])
    clock.t = 29.0
    p.beat()
    assert out.getvalue() == ""
    clock.t = 31.0
    p.beat()
    assert out.getvalue() == "speceq: still sampling baseline · a · slice 50, 31 s on it, 31 s in all\n"
    clock.t = 65.0
    p.finished(todo[50])  # 1 % more, but 30 s since the last line of this case and engine
    assert out.getvalue().splitlines()[-1] == "speceq: baseline · a: 51/100 chunks (51 %), 65 s"


def test_make_progress_prints_plain_lines_when_stderr_is_not_a_terminal(capsys):
    todo = chunks("baseline", "a", 2)
    assert isinstance(make_progress(False, todo, []), NoProgress)
    progress = make_progress(True, todo, [])
    assert isinstance(progress, LineProgress)  # pytest captures stderr: not a terminal
    with progress:
        progress.finished(todo[0])
    assert "speceq: baseline · a: 1/2 chunks (50 %)" in capsys.readouterr().err

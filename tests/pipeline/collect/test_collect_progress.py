"""Progress outside a terminal: rows done / expected and an ETA per engine and case, at most one line per 30 s per case."""

from __future__ import annotations

import io
from dataclasses import dataclass

from speceq.pipeline.collect.progress import LINE_INTERVAL_S, LineProgress, NoProgress, duration, make_progress


@dataclass(frozen=True)
class _Case:
    case_id: str


@dataclass(frozen=True)
class _Chunk:
    role: str
    case: _Case
    slice_index: int
    n: int = 100

    def label(self) -> str:
        return f"{self.role} · {self.case.case_id} · slice {self.slice_index}"


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def chunks(role: str, case: str, k: int, n: int = 100) -> list[_Chunk]:
    return [_Chunk(role, _Case(case), i, n) for i in range(k)]


def sample(p: LineProgress, clock: _Clock, todo: list[_Chunk], seconds: float) -> None:
    for c in todo:
        p.started(c)
        clock.t += seconds
        p.finished(c)


def test_one_line_per_case_at_most_every_30_s_with_rows_and_an_eta_per_engine():
    base, cand = chunks("baseline", "a", 4), chunks("candidate", "a", 4)
    out, clock = io.StringIO(), _Clock()
    with LineProgress(base + cand, [], out, clock=clock, heartbeat=False) as p:
        sample(p, clock, base + cand, 10.0)  # a chunk of 100 rows every 10 s: lines at 10, 40 and 70 s
    assert out.getvalue().splitlines() == [
        "speceq: case 'a': baseline 100/400 rows, ETA 30 s; candidate 0/400 rows; 10 s in all",
        "speceq: case 'a': baseline 400/400 rows (done); candidate 0/400 rows; 40 s in all",
        "speceq: case 'a': baseline 400/400 rows (done); candidate 300/400 rows, ETA 10 s; 1 min 10 s in all",
    ]


def test_the_rate_limit_is_per_case_and_holds_for_any_chunk_rate():
    out, clock = io.StringIO(), _Clock()
    a, b = chunks("candidate", "a", 200, n=5), chunks("candidate", "b", 200, n=5)
    with LineProgress(a + b, [], out, clock=clock, heartbeat=False) as p:
        for ca, cb in zip(a, b):  # two cases side by side, a chunk each every 0.7 s
            sample(p, clock, [ca, cb], 0.35)
    times: dict[str, list[float]] = {"a": [], "b": []}
    for line in out.getvalue().splitlines():
        case = line.split("'")[1]
        total = line.rsplit("; ", 1)[1]
        times[case].append(float(total.split()[0]) * 60 + float(total.split()[2]) if "min" in total
                           else float(total.split()[0]))
    for case, seen in times.items():
        assert len(seen) == 5, (case, seen)  # 140 s of sampling: at 0.x s, then every >= 30 s
        assert all(later - earlier >= LINE_INTERVAL_S - 1 for earlier, later in zip(seen, seen[1:])), seen


def test_reused_rows_count_as_done_but_not_in_the_pace():
    todo = chunks("baseline", "a", 4)
    out, clock = io.StringIO(), _Clock()
    p = LineProgress(todo, todo[:2], out, clock=clock, heartbeat=False)
    sample(p, clock, todo[2:3], 50.0)  # 100 rows in 50 s: 2 rows/s, 100 rows to go
    assert out.getvalue() == "speceq: case 'a': baseline 300/400 rows, ETA 50 s; 50 s in all\n"


def test_a_slow_chunk_gets_a_still_sampling_line_with_the_time_left_at_the_engine_pace():
    todo = chunks("candidate", "a", 3, n=500)
    out, clock = io.StringIO(), _Clock()
    p = LineProgress(todo, [], out, clock=clock, heartbeat=False)
    p.started(todo[0])
    clock.t = 29.0
    p.beat()
    assert out.getvalue() == ""  # nothing runs for 30 s yet
    clock.t = 31.0
    p.beat()
    assert out.getvalue() == ("speceq: case 'a': still sampling candidate slice 0 (500 rows), 31 s on it; "
                              "candidate 0/1500 rows; 31 s in all\n")
    clock.t = 45.0
    p.beat()
    assert out.getvalue().count("\n") == 1  # at most one line per 30 s for the case
    clock.t = 100.0
    p.finished(todo[0])  # 500 rows in 100 s: 5 rows/s
    p.started(todo[1])
    clock.t = 160.0
    p.beat()
    assert out.getvalue().splitlines()[-1] == (
        "speceq: case 'a': still sampling candidate slice 1 (500 rows), 1 min 00 s on it, about 40 s left at this "
        "engine's pace; candidate 500/1500 rows, ETA 3 min 20 s; 2 min 40 s in all")


def test_durations_read_as_seconds_minutes_and_hours():
    assert [duration(x) for x in (0.4, 59.4, 65, 3599, 3600, 7620)] == \
        ["0 s", "59 s", "1 min 05 s", "59 min 59 s", "1 h 00 min", "2 h 07 min"]


def test_make_progress_prints_plain_lines_when_stderr_is_not_a_terminal(capsys):
    todo = chunks("baseline", "a", 2)
    assert isinstance(make_progress(False, todo, []), NoProgress)
    progress = make_progress(True, todo, [])
    assert isinstance(progress, LineProgress)  # pytest captures stderr: not a terminal
    with progress:
        progress.started(todo[0])
        progress.finished(todo[0])
    assert "speceq: case 'a': baseline 100/200 rows" in capsys.readouterr().err


def test_rows_an_engine_reports_inside_a_chunk_show_in_the_still_sampling_line():
    todo = chunks("candidate", "a", 1, n=500)
    out, clock = io.StringIO(), _Clock()
    p = LineProgress(todo, [], out, clock=clock, heartbeat=False)
    p.started(todo[0])
    clock.t = 60.0
    p.rows(todo[0], 120)  # 120 rows in 60 s: 2 rows/s, 380 left
    p.beat()
    assert out.getvalue() == ("speceq: case 'a': still sampling candidate slice 0: 120/500 rows, 1 min 00 s on it, "
                              "about 3 min 10 s left; candidate 0/500 rows; 1 min 00 s in all\n")
    p.rows(todo[0], 9999)  # clipped to the chunk
    clock.t = 100.0
    p.finished(todo[0])
    p.rows(todo[0], 10)  # after the chunk: ignored
    assert out.getvalue().splitlines()[-1] == "speceq: case 'a': candidate 500/500 rows (done); 1 min 40 s in all"

"""benchmarks/blocked_calibration.py: one small draw per cell prints every law and layout, each size at or below its
level (the blocked test is exact; a wrong sign or offset in the blocks would put the size above it)."""

from __future__ import annotations

from benchmark_scripts import load_script


def test_every_cell_is_printed_and_at_or_below_its_level(capsys) -> None:
    bench = load_script("blocked_calibration")
    assert bench.main(["--draws", "1", "--ratios", "2", "--rows", "60", "--seed", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(bench.LAWS) * 3
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        sizes = [float(x) for x in cells[3:]]
        assert all(0 <= x <= 1.0 + 1e-9 for x in sizes), row
    assert any(float(c) > 0.5 for row in rows for c in row.strip("|").split("|")[3:6])  # not vacuously zero

"""The mixture power curve as a self-contained SVG, written by hand (no plotting library).

x: the mixture mutant's exact TV shift (first two positions); y: the fraction of
repetitions in which each method rejects at level alpha, at one sample size per engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from xml.sax.saxutils import escape

from speceq.calibrate.results import CurvePoint

#: Methods drawn: colour (colour-blind-safe palette) and legend label.
CURVE_METHODS: dict[str, tuple[str, str]] = {
    "speceq": ("#0072B2", "speceq"),
    "np": ("#000000", "Neyman-Pearson (2 tokens)"),
    "vllm": ("#E69F00", "vLLM L2 (calibrated)"),
    "trtllm": ("#009E73", "TRT-LLM KL (calibrated)"),
}
WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 64, 220, 40, 56


def _ticks(high: float, count: int = 5) -> list[float]:
    """Ticks 0, step, 2 step, ... <= high, with a round step (1, 2, 2.5 or 5 times a power of 10)."""
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [round(i * step, 10) for i in range(int(high / step + 1e-9) + 1)]


def power_curve_svg(points: Sequence[CurvePoint], *, title: str = "Detection rate vs TV shift (mixture mutant)") -> str:
    """SVG text of the power curve of ``points`` (sorted by TV); raises ValueError when empty."""
    if not points:
        raise ValueError("`points` is empty: no power curve to draw")
    pts = sorted(points, key=lambda c: c.tv)
    x_max = max(c.tv for c in pts) * 1.05 or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(v: float) -> float:
        return LEFT + plot_w * v / x_max

    def y(v: float) -> float:
        return TOP + plot_h * (1.0 - v)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="{TOP - 16}" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for t in _ticks(1.0):
        out.append(f'<line x1="{LEFT}" y1="{y(t):.1f}" x2="{LEFT + plot_w}" y2="{y(t):.1f}" stroke="#dddddd"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for t in _ticks(x_max):
        out.append(f'<line x1="{x(t):.1f}" y1="{TOP}" x2="{x(t):.1f}" y2="{TOP + plot_h}" stroke="#eeeeee"/>')
        out.append(f'<text x="{x(t):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{t:.3g}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333333"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 14}" text-anchor="middle">'
               "TV shift of the first two tokens (exact)</text>")
    out.append(f'<text x="16" y="{TOP + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {TOP + plot_h / 2})">detection rate</text>')
    legend_y = TOP + 8
    for method, (colour, label) in CURVE_METHODS.items():
        have = [(c.tv, c.rates[method]) for c in pts if method in c.rates]
        if not have:
            continue
        path = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in have)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for a, b in have:
            out.append(f'<circle cx="{x(a):.1f}" cy="{y(b):.1f}" r="3.5" fill="{colour}">'
                       f"<title>{escape(label)}: TV {a:.4f}, rate {b:.2f}</title></circle>")
        lx = LEFT + plot_w + 14
        out.append(f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 22}" y2="{legend_y}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 28}" y="{legend_y + 4}">{escape(label)}</text>')
        legend_y += 20
    n = pts[0].n
    out.append(f'<text x="{LEFT + plot_w + 14}" y="{legend_y + 10}" fill="#555555">n = {n} samples per engine</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"

"""The mixture power curve as a self-contained SVG, written by hand (no plotting library).

x: the mixture mutant's exact TV shift (first two positions); y: the fraction of
repetitions in which each method rejects at level alpha, at one sample size per engine.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup

from speceq.power.results import CurvePoint
from speceq.reports.svg import element, ticks

#: Methods drawn: colour (colour-blind-safe palette) and legend label.
CURVE_METHODS: dict[str, tuple[str, str]] = {
    "speceq": ("#0072B2", "speceq"),
    "np": ("#000000", "Neyman-Pearson (2 tokens)"),
    "vllm": ("#E69F00", "vLLM L2 (calibrated)"),
    "trtllm": ("#009E73", "TRT-LLM KL (calibrated)"),
}
WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 64, 220, 40, 56


def power_curve_svg(points: Sequence[CurvePoint], *, title: str = "Detection rate vs TV shift (mixture mutant)") -> str:
    """SVG text of the power curve of ``points`` (sorted by TV); raises ValueError when empty.

    Built with the report's escaping element writer (:func:`speceq.reports.svg.element`).
    """
    if not points:
        raise ValueError("`points` is empty: no power curve to draw")
    pts = sorted(points, key=lambda c: c.tv)
    x_max = max(c.tv for c in pts) * 1.05 or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(v: float) -> float:
        return LEFT + plot_w * v / x_max

    def y(v: float) -> float:
        return TOP + plot_h * (1.0 - v)

    out: list[Markup] = [
        element("title", None, title),
        element("rect", {"x": 0, "y": 0, "width": WIDTH, "height": HEIGHT, "fill": "white"}),
        element("text", {"x": LEFT, "y": TOP - 16, "font-size": 14, "font-weight": "bold"}, title),
    ]
    for t in ticks(0.0, 1.0):
        out.append(element("line", {"x1": LEFT, "y1": y(t), "x2": LEFT + plot_w, "y2": y(t), "stroke": "#dddddd"}))
        out.append(element("text", {"x": LEFT - 8, "y": y(t) + 4, "text-anchor": "end"}, f"{t:g}"))
    for t in ticks(0.0, x_max):
        out.append(element("line", {"x1": x(t), "y1": TOP, "x2": x(t), "y2": TOP + plot_h, "stroke": "#eeeeee"}))
        out.append(element("text", {"x": x(t), "y": TOP + plot_h + 18, "text-anchor": "middle"}, f"{t:.3g}"))
    out.append(element("rect", {"x": LEFT, "y": TOP, "width": plot_w, "height": plot_h, "fill": "none",
                                "stroke": "#333333"}))
    out.append(element("text", {"x": LEFT + plot_w / 2, "y": HEIGHT - 14, "text-anchor": "middle"},
                       "TV shift of the first two tokens (exact)"))
    out.append(element("text", {"x": 16, "y": TOP + plot_h / 2, "text-anchor": "middle",
                                "transform": f"rotate(-90 16 {TOP + plot_h / 2:g})"}, "detection rate"))
    legend_y = TOP + 8
    for method, (colour, label) in CURVE_METHODS.items():
        have = [(c.tv, c.rates[method]) for c in pts if method in c.rates]
        if not have:
            continue
        path = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in have)
        out.append(element("polyline", {"points": path, "fill": "none", "stroke": colour, "stroke-width": 2}))
        for a, b in have:
            out.append(element("circle", {"cx": x(a), "cy": y(b), "r": 3.5, "fill": colour},
                               element("title", None, f"{label}: TV {a:.4f}, rate {b:.2f}")))
        lx = LEFT + plot_w + 14
        out.append(element("line", {"x1": lx, "y1": legend_y, "x2": lx + 22, "y2": legend_y, "stroke": colour,
                                    "stroke-width": 2}))
        out.append(element("text", {"x": lx + 28, "y": legend_y + 4}, label))
        legend_y += 20
    out.append(element("text", {"x": LEFT + plot_w + 14, "y": legend_y + 10, "fill": "#555555"},
                       f"n = {pts[0].n} samples per engine"))
    svg = element("svg", {"xmlns": "http://www.w3.org/2000/svg", "width": WIDTH, "height": HEIGHT,
                          "viewBox": f"0 0 {WIDTH} {HEIGHT}", "font-family": "sans-serif", "font-size": 12}, *out)
    return str(svg) + "\n"

"""Inline SVG charts of the report, built from numbers only.

Every element goes through :func:`element`, which formats numeric attributes itself and
escapes every string (attribute values and text), so nothing from a result can become
markup. Coordinates are in SVG user units (= CSS pixels at 100 % zoom).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape
from scipy import stats

from speceq.reports.format import clean_text, finite_or_none, fmt_num, fmt_pct, token_label, visible_token
from speceq.verdicts.result import TokenFrequency, ZPath

CHART_WIDTH = 760
#: Standardised difference of two proportions beyond which a bar pair is marked as moved (visual aid, not a test).
MOVED_Z = 3.0


def _num(x: float) -> str:
    if not math.isfinite(x):
        raise ValueError(f"SVG coordinate must be finite, got {x!r}")
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if s == "-0" else s


def element(tag: str, attrs: dict[str, str | float | int] | None = None, *children: Markup | str) -> Markup:
    """``<tag attrs>children</tag>``; numbers formatted, strings cleaned and escaped."""
    parts = [tag]
    for key, value in (attrs or {}).items():
        text = value if isinstance(value, str) else _num(float(value))
        parts.append(f'{key}="{escape(clean_text(text))}"')
    body = "".join(c if isinstance(c, Markup) else str(escape(clean_text(c))) for c in children)
    return Markup(f"<{' '.join(parts)}>{body}</{tag}>")


def _svg(width: float, height: float, label: str, *children: Markup) -> Markup:
    return element("svg", {"width": width, "height": height, "viewBox": f"0 0 {_num(width)} {_num(height)}",
                           "role": "img", "aria-label": label}, element("title", None, label), *children)


def nice_ceiling(x: float) -> float:
    """Smallest of 1, 2, 2.5, 5 times a power of ten that is >= x (x > 0)."""
    if x <= 0 or not math.isfinite(x):
        return 1.0
    p = 10.0 ** math.floor(math.log10(x))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * p >= x * (1 - 1e-12):
            return m * p
    return 10.0 * p


def shift_z(baseline_count: int, candidate_count: int, n_baseline: int, n_candidate: int) -> float:
    """Two-proportion z of one token (pooled standard error); 0 when undefined."""
    if n_baseline <= 0 or n_candidate <= 0:
        return 0.0
    pooled = (baseline_count + candidate_count) / (n_baseline + n_candidate)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_baseline + 1 / n_candidate))
    if se == 0:
        return 0.0
    return (candidate_count / n_candidate - baseline_count / n_baseline) / se


# ---- frequency bars -----------------------------------------------------------------------------

_LABEL_W, _DELTA_W, _ROW_H, _BAR_H, _TOP = 200, 130, 30, 10, 26


def frequency_chart(tokens: Sequence[TokenFrequency], n_baseline: int, n_candidate: int,
                    labels: Sequence[str] | None = None, title: str = "token frequencies, baseline vs candidate") -> Markup:
    """Horizontal bars of one position: baseline and candidate frequency per token, oracle ticks.

    Frequencies are counts divided by the engine's sample count. Tokens whose standardised
    difference exceeds :data:`MOVED_Z` get a bold label and an arrow. ``labels`` replaces the
    token labels (e.g. bins of a length or pair test, which are not single tokens).
    """
    freqs = [(t, t.baseline_count / n_baseline if n_baseline else 0.0,
              t.candidate_count / n_candidate if n_candidate else 0.0) for t in tokens]
    top = max([max(b, c, finite_or_none(t.oracle_prob) or 0.0) for t, b, c in freqs] + [1e-9])
    scale_max = min(1.0, nice_ceiling(top))
    plot_w = CHART_WIDTH - _LABEL_W - _DELTA_W
    x0 = _LABEL_W
    height = _TOP + _ROW_H * len(freqs) + 22
    kids: list[Markup] = [
        element("rect", {"class": "bar-base", "x": x0, "y": 6, "width": 12, "height": 9}),
        element("text", {"x": x0 + 16, "y": 14, "class": "legend"}, "baseline"),
        element("rect", {"class": "bar-cand", "x": x0 + 90, "y": 6, "width": 12, "height": 9}),
        element("text", {"x": x0 + 106, "y": 14, "class": "legend"}, "candidate"),
        element("text", {"x": CHART_WIDTH - 4, "y": 14, "class": "legend", "text-anchor": "end"}, "Δ cand − base"),
    ]
    if any(finite_or_none(t.oracle_prob) is not None for t, _, _ in freqs):
        kids += [element("line", {"class": "oracle", "x1": x0 + 190, "x2": x0 + 190, "y1": 4, "y2": 17}),
                 element("text", {"x": x0 + 196, "y": 14, "class": "legend"}, "oracle probability")]
    for i, (t, fb, fc) in enumerate(freqs):
        y = _TOP + i * _ROW_H
        z = shift_z(t.baseline_count, t.candidate_count, n_baseline, n_candidate)
        moved = abs(z) >= MOVED_Z
        oracle = finite_or_none(t.oracle_prob)
        what = f"token #{t.token} “{visible_token(t.text)}”" if labels is None else visible_token(labels[i])
        tip = (f"{what}: baseline {t.baseline_count:,}/{n_baseline:,} ({fmt_pct(fb, 2)}), "
               f"candidate {t.candidate_count:,}/{n_candidate:,} ({fmt_pct(fc, 2)})"
               + (f", oracle {fmt_pct(oracle, 2)}" if oracle is not None else "") + f", z = {z:.1f}")
        row = [
            element("title", None, tip),
            element("text", {"x": x0 - 8, "y": y + _BAR_H + 4, "text-anchor": "end",
                             "class": "tok moved" if moved else "tok"},
                    token_label(t.text, t.token) if labels is None else _short(visible_token(labels[i]), 26)),
            element("rect", {"class": "bar-base", "x": x0, "y": y, "height": _BAR_H,
                             "width": plot_w * min(fb, scale_max) / scale_max}),
            element("rect", {"class": "bar-cand", "x": x0, "y": y + _BAR_H + 1, "height": _BAR_H,
                             "width": plot_w * min(fc, scale_max) / scale_max}),
            element("text", {"x": CHART_WIDTH - 4, "y": y + _BAR_H + 4, "text-anchor": "end",
                             "class": "delta moved" if moved else "delta"},
                    f"{'▲ ' if moved and z > 0 else '▼ ' if moved else ''}{100 * (fc - fb):+.2f} pp"),
        ]
        if oracle is not None:
            ox = x0 + plot_w * min(oracle, scale_max) / scale_max
            row.append(element("line", {"class": "oracle", "x1": ox, "x2": ox, "y1": y - 2, "y2": y + 2 * _BAR_H + 3}))
        kids.append(element("g", {"class": "tokrow"}, *row))
    axis_y = _TOP + _ROW_H * len(freqs)
    kids.append(element("line", {"class": "axis", "x1": x0, "x2": x0 + plot_w, "y1": axis_y, "y2": axis_y}))
    for k in range(6):
        v = scale_max * k / 5
        x = x0 + plot_w * k / 5
        kids.append(element("line", {"class": "axis", "x1": x, "x2": x, "y1": axis_y, "y2": axis_y + 4}))
        kids.append(element("text", {"x": x, "y": axis_y + 16, "text-anchor": "middle", "class": "tick"}, f"{100 * v:.4g} %"))
    return _svg(CHART_WIDTH, height, title, *kids)


def _short(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


# ---- PIT histogram ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PitBand:
    """Pointwise binomial band of one PIT bin under uniformity: counts in [low, high] w.p. >= level."""

    n: int
    bins: int
    expected: float
    low: int
    high: int
    level: float
    outside: int  # bins whose count is outside [low, high]


def pit_band(counts: Sequence[int], level: float = 0.99) -> PitBand:
    """Band of Binomial(n, 1/bins) quantiles ``(1-level)/2`` and ``(1+level)/2`` around n/bins."""
    n, bins = int(sum(counts)), len(counts)
    if bins == 0:
        raise ValueError("`counts` is empty: a PIT histogram needs at least one bin")
    low = int(stats.binom.ppf((1 - level) / 2, n, 1 / bins))
    high = int(stats.binom.ppf((1 + level) / 2, n, 1 / bins))
    outside = sum(1 for c in counts if c < low or c > high)
    return PitBand(n=n, bins=bins, expected=n / bins, low=low, high=high, level=level, outside=outside)


def _nice_step(span: float, ticks: int = 5) -> float:
    """A 1/2/2.5/5 x 10^k step that cuts ``span`` into about ``ticks`` intervals."""
    return nice_ceiling(span / ticks) if span > 0 else 1.0


def pit_axis(counts: Sequence[int], band: PitBand) -> tuple[float, float, float]:
    """(start, end, tick step) of the count axis: zoomed onto the bars and the band, ticks at nice values."""
    lo_v, hi_v = min(min(counts), band.low), max(max(counts), band.high, 1)
    step = _nice_step(max(hi_v - lo_v, 1) * 2.2)
    ymin = max(0.0, math.floor((lo_v - 0.6 * (hi_v - lo_v)) / step) * step)
    ymax = math.ceil((hi_v + 0.15 * (hi_v - lo_v) + 1e-9) / step) * step
    return ymin, ymax, step


def pit_histogram(counts: Sequence[int], band: PitBand) -> Markup:
    """Bars of the PIT histogram over [0, 1], the uniform band shaded, bins outside it in red.

    The count axis is zoomed onto the band and the bars (:func:`pit_axis`; it starts above 0
    when that range is narrow); the lowest tick says where it starts.
    """
    left, right, top, bottom, height = 56, 12, 10, 30, 230
    plot_w, plot_h = CHART_WIDTH - left - right, height - top - bottom
    ymin, ymax, step = pit_axis(counts, band)

    def y_of(v: float) -> float:
        return top + plot_h * (1 - (v - ymin) / (ymax - ymin))

    kids = [element("rect", {"class": "band", "x": left, "width": plot_w,
                             "y": y_of(band.high), "height": max(y_of(band.low) - y_of(band.high), 1)})]
    bw = plot_w / len(counts)
    base = top + plot_h
    for i, c in enumerate(counts):
        out = c < band.low or c > band.high
        kids.append(element("rect", {"class": "pit-out" if out else "pit-in", "x": left + i * bw + 1, "width": max(bw - 2, 1),
                                     "y": y_of(c), "height": base - y_of(c)},
                            element("title", None, f"u in [{i / len(counts):.2f}, {(i + 1) / len(counts):.2f}): {c:,} "
                                                   f"(band {band.low:,}–{band.high:,})")))
    ey = y_of(band.expected)
    kids.append(element("line", {"class": "expected", "x1": left, "x2": left + plot_w, "y1": ey, "y2": ey}))
    kids.append(element("line", {"class": "axis", "x1": left, "x2": left + plot_w, "y1": base, "y2": base}))
    kids.append(element("line", {"class": "axis", "x1": left, "x2": left, "y1": top, "y2": base}))
    for k in range(5):
        x = left + plot_w * k / 4
        kids.append(element("text", {"x": x, "y": base + 16, "text-anchor": "middle", "class": "tick"}, f"{k / 4:g}"))
    v = ymin
    while v <= ymax + 1e-9:
        kids.append(element("line", {"class": "axis", "x1": left - 4, "x2": left, "y1": y_of(v), "y2": y_of(v)}))
        kids.append(element("text", {"x": left - 6, "y": y_of(v) + 4, "text-anchor": "end", "class": "tick"}, fmt_num(int(round(v)))))
        v += step
    kids.append(element("text", {"x": left + plot_w / 2, "y": height - 2, "text-anchor": "middle", "class": "tick"}, "PIT value u"))
    return _svg(CHART_WIDTH, height, "histogram of randomized PIT values with the uniform band", *kids)


# ---- TV scale -----------------------------------------------------------------------------------


def tv_scale(estimate: float | None, upper: float | None, tolerance: float, *, quantity: str = "TV") -> Markup:
    """A 0..max axis with the tolerance line, the estimate (dot) and its upper bound (end of bar).

    quantity: what is bounded, named in the picture's title (``"TV"``, or ``"PIT-law"`` for the bound of
    ``--certificate pit-law``, which has no estimate).
    """
    est, up = finite_or_none(estimate), finite_or_none(upper)
    left, right, width, height, axis_y = 20, 20, CHART_WIDTH, 84, 52
    xmax = nice_ceiling(max(tolerance * 1.6, (up or 0) * 1.1, (est or 0) * 1.1))
    plot_w = width - left - right

    def x_of(v: float) -> float:
        return left + plot_w * max(0.0, min(v, xmax)) / xmax

    kids = [element("line", {"class": "axis", "x1": left, "x2": left + plot_w, "y1": axis_y, "y2": axis_y})]
    for k in range(6):
        v = xmax * k / 5
        kids.append(element("line", {"class": "axis", "x1": x_of(v), "x2": x_of(v), "y1": axis_y, "y2": axis_y + 4}))
        kids.append(element("text", {"x": x_of(v), "y": axis_y + 17, "text-anchor": "middle", "class": "tick"}, f"{v:g}"))
    tx = x_of(tolerance)
    kids.append(element("rect", {"class": "tv-beyond", "x": tx, "y": 16, "width": left + plot_w - tx, "height": axis_y - 16}))
    kids.append(element("line", {"class": "tolerance", "x1": tx, "x2": tx, "y1": 2, "y2": axis_y}))
    kids.append(element("text", {"x": tx + 4, "y": 11, "class": "tick"}, f"tolerance ε = {tolerance:g}"))
    if est is not None and up is not None:
        cls = "tv-ok" if up < tolerance else "tv-wide"
        kids.append(element("rect", {"class": cls, "x": x_of(est), "y": 31, "height": 10,
                                     "width": max(x_of(up) - x_of(est), 1)},
                            element("title", None, f"{quantity} estimate {est:.4g}, upper bound {up:.4g}")))
    if est is not None:
        kids.append(element("circle", {"class": "tv-est", "cx": x_of(est), "cy": 36, "r": 5}))
        kids.append(element("text", {"x": x_of(est) - 4, "y": 27, "text-anchor": "end", "class": "tick"}, f"TV̂ {est:.3g}"))
    if up is not None:
        kids.append(element("line", {"class": "tv-up", "x1": x_of(up), "x2": x_of(up), "y1": 27, "y2": 45}))
        kids.append(element("text", {"x": x_of(up) + 4, "y": 27, "class": "tick"},
                            f"U {up:.3g}" + (" (off scale)" if up > xmax else "")))
    what = f"{quantity} estimate and upper confidence bound" if est is not None else f"{quantity} upper confidence bound"
    return _svg(width, height, f"{what} against the tolerance", *kids)


# ---- martingale z-test path ---------------------------------------------------------------------


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Nice tick values covering [lo, hi]."""
    step = _nice_step(hi - lo, count)
    first = math.ceil(lo / step - 1e-9) * step
    out, v = [], first
    while v <= hi + 1e-9 * step:
        out.append(0.0 if abs(v) < step * 1e-9 else v)
        v += step
    return out


def zpath_chart(path: ZPath, z_crit: float, *, level_label: str) -> Markup:
    """The running sum of f − E f over the candidate's tokens, inside its null band ±z·sqrt(running Var f).

    The test is evaluated once, at the last token: it rejects when the path ends outside the
    band (the end dot is red then). The band is drawn at every token so that the reader sees
    where the excess builds up; crossing it mid-way is not a rejection by itself.
    """
    left, right, top, bottom, height = 72, 34, 14, 34, 240
    plot_w, plot_h = CHART_WIDTH - left - right, height - top - bottom
    pts = [(t, e, v) for t, e, v in zip(path.tokens, path.excess, path.variance)
           if math.isfinite(e) and math.isfinite(v) and v >= 0]
    if not pts:
        return _svg(CHART_WIDTH, 40, f"{path.test}: no path data", element("text", {"x": 8, "y": 24}, "no path data"))
    n_max = max(t for t, _, _ in pts)
    band = [z_crit * math.sqrt(v) for _, _, v in pts]
    ymax = nice_ceiling(max([abs(e) for _, e, _ in pts] + band + [1e-9]) * 1.08)

    def x_of(t: float) -> float:
        return left + plot_w * t / max(n_max, 1)

    def y_of(v: float) -> float:
        return top + plot_h * (1 - (v + ymax) / (2 * ymax))

    upper = [(x_of(t), y_of(b)) for (t, _, _), b in zip(pts, band)]
    lower = [(x_of(t), y_of(-b)) for (t, _, _), b in zip(pts, band)]
    outline = [(x_of(0), y_of(0))] + upper + lower[::-1]
    kids: list[Markup] = [
        element("polygon", {"class": "band", "points": " ".join(f"{_num(x)},{_num(y)}" for x, y in outline)}),
        element("line", {"class": "expected", "x1": left, "x2": left + plot_w, "y1": y_of(0), "y2": y_of(0)}),
        element("line", {"class": "axis", "x1": left, "x2": left, "y1": top, "y2": top + plot_h}),
        element("line", {"class": "axis", "x1": left, "x2": left + plot_w, "y1": top + plot_h, "y2": top + plot_h}),
    ]
    for v in ticks(-ymax, ymax):
        kids.append(element("line", {"class": "axis", "x1": left - 4, "x2": left, "y1": y_of(v), "y2": y_of(v)}))
        kids.append(element("text", {"x": left - 6, "y": y_of(v) + 4, "text-anchor": "end", "class": "tick"}, f"{v:g}"))
    for t in ticks(0, n_max):
        kids.append(element("line", {"class": "axis", "x1": x_of(t), "x2": x_of(t), "y1": top + plot_h, "y2": top + plot_h + 4}))
        kids.append(element("text", {"x": x_of(t), "y": top + plot_h + 16, "text-anchor": "middle", "class": "tick"},
                            fmt_num(int(round(t)))))
    line = [(x_of(0), y_of(0))] + [(x_of(t), y_of(e)) for t, e, _ in pts]
    kids.append(element("polyline", {"class": "zpath", "points": " ".join(f"{_num(x)},{_num(y)}" for x, y in line)}))
    t_end, e_end, v_end = pts[-1]
    outside = abs(e_end) > z_crit * math.sqrt(v_end)
    z_end = e_end / math.sqrt(v_end) if v_end > 0 else 0.0
    kids.append(element("circle", {"class": "zend out" if outside else "zend", "cx": x_of(t_end), "cy": y_of(e_end), "r": 5},
                        element("title", None, f"after {t_end:,} tokens: sum {e_end:.4g}, Z = {z_end:.3g} "
                                               f"({'outside' if outside else 'inside'} the band ±{z_crit:.3g}·sd)")))
    kids.append(element("text", {"x": left + plot_w / 2, "y": height - 4, "text-anchor": "middle", "class": "tick"},
                        "candidate tokens scored"))
    kids.append(element("text", {"x": 14, "y": top + plot_h / 2, "text-anchor": "middle", "class": "tick",
                                 "transform": f"rotate(-90 14 {_num(top + plot_h / 2)})"}, "running sum of f − E f"))
    kids.append(element("text", {"x": left + 8, "y": top + 12, "class": "legend"},
                        f"grey: null band ±{z_crit:.3g}·sqrt(running Var f) ({level_label})"))
    return _svg(CHART_WIDTH, height, f"{path.test}: running sum against its null band", *kids)

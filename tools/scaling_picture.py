"""The exit criteria's picture (tools/exit_criteria.py): Ready workers and unschedulable demand
pods against time, as steps, each criterion's span shaded green where it passed and red where it
failed, with its name. Plain SVG, which any browser opens: no plotting library to install.
"""

from __future__ import annotations

import itertools
from html import escape
from typing import Any

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 900, 360, 50, 20, 40, 40
SERIES = {"workers": "#1f77b4", "unschedulable": "#ff7f0e"}


def _steps(rows: list[list[Any]], key: str, end: float) -> list[tuple[float, int]]:
    """(seconds, value) at each change of `key`, held to `end`."""
    points = [(float(stamp), int(value)) for stamp, name, value in rows if name == key]
    return [*points, (end, points[-1][1])] if points else []


def svg(rows: list[list[Any]], results: list[dict[str, Any]], *, title: str) -> str:
    end = max([1.0, *(float(row[0]) for row in rows)])
    top = max([3, *(int(row[2]) for row in rows if row[1] in SERIES)])

    def x(seconds: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * seconds / end

    def y(value: float) -> float:
        return HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * value / top

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="{LEFT}" y="20" font-size="14">{escape(title)}</text>',
    ]
    for result in results:
        if "started" not in result:
            continue
        start, stop = float(result["started"]), float(result["started"]) + float(result["seconds"])
        colour = "#2ca02c" if result["passed"] else "#d62728"
        parts.append(
            f'<rect x="{x(start):.1f}" y="{TOP}" width="{max(x(stop) - x(start), 1):.1f}" '
            f'height="{HEIGHT - TOP - BOTTOM}" fill="{colour}" fill-opacity="0.12"/>'
        )
        verdict = "passed" if result["passed"] else "FAILED"
        parts.append(f'<text x="{x(start) + 3:.1f}" y="{TOP + 14}">{escape(result["name"])}: {verdict}</text>')
    parts.append(f'<line x1="{LEFT}" y1="{y(0)}" x2="{WIDTH - RIGHT}" y2="{y(0)}" stroke="black"/>')
    parts.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{y(0)}" stroke="black"/>')
    for value in range(top + 1):
        parts.append(f'<text x="{LEFT - 20}" y="{y(value) + 4:.1f}">{value}</text>')
    parts.append(f'<text x="{WIDTH - RIGHT - 80}" y="{HEIGHT - 10}">{end:.0f} s</text>')
    for index, (key, colour) in enumerate(SERIES.items()):
        points, path = _steps(rows, key, end), []
        for (t0, v0), (t1, _) in itertools.pairwise(points):
            path += [f"{x(t0):.1f},{y(v0):.1f}", f"{x(t1):.1f},{y(v0):.1f}"]
        if path:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(path)}"/>')
        label = "Ready workers" if key == "workers" else "unschedulable demand pods"
        parts.append(f'<text x="{LEFT + 10 + 180 * index}" y="{HEIGHT - 10}" fill="{colour}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"

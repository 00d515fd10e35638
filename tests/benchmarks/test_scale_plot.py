"""The hand-drawn SVG of ``partition_scale_bench``: a panel per figure, a line per
system through its measured points, and no point where a system has no figure."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path

from tests.benchmarks.scale_plot import Series, write_svg

SVG = "{http://www.w3.org/2000/svg}"


def test_each_figure_is_a_panel_with_a_line_per_measured_system(tmp_path: Path) -> None:
    path = tmp_path / "scale.svg"
    figures = [
        Series("start s", [500, 2000, 4000], {"tierlog": [1.0, 2.0, 4.0], "Kafka": [3, 5, 9]}),
        Series("/metrics ms", [500, 2000, 4000], {"tierlog": [10, 30, 70], "Kafka": [None] * 3}),
    ]

    write_svg(path, "partitions (N)", figures)

    svg = ElementTree.parse(path).getroot()
    titles = [t.text for t in svg.iter(f"{SVG}text") if t.get("font-weight") == "bold"]
    assert titles == ["start s", "/metrics ms"]
    lines = [line.get("points", "").split() for line in svg.iter(f"{SVG}polyline")]
    assert [len(points) for points in lines] == [3, 3, 3]  # Kafka has no /metrics line
    assert len(list(svg.iter(f"{SVG}circle"))) == 9

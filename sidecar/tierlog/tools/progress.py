"""Progress bars for long CLI work, on stderr so that stdout stays clean for pipes.

The core functions of a command take a ``Track`` and call it as
``with track(description, total, unit) as advance: ... advance(n)``; they never
import tqdm.  The command's adapter chooses the tracker: ``no_progress`` in tests
and pipelines, ``tqdm_progress`` when a person is watching.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TextIO

from tqdm import tqdm

__all__ = ["Advance", "Track", "choose_tracker", "no_progress", "tqdm_progress"]

Advance = Callable[[int], None]
Track = Callable[[str, int, str], AbstractContextManager[Advance]]

# With automatic progress a bar only appears once the work has taken this long, so
# small files never flash a bar.
AUTO_DELAY_S = 1.0


@contextmanager
def no_progress(_description: str, _total: int, _unit: str) -> Iterator[Advance]:
    yield lambda _n: None


def tqdm_progress(delay_s: float = 0.0, stream: TextIO | None = None) -> Track:
    """A tracker drawing a tqdm bar on ``stream`` (stderr by default)."""

    @contextmanager
    def track(description: str, total: int, unit: str) -> Iterator[Advance]:
        bar = tqdm(
            total=total,
            desc=description,
            unit=unit,
            unit_scale=unit == "B",
            unit_divisor=1024 if unit == "B" else 1000,
            file=stream or sys.stderr,
            delay=delay_s,
            leave=False,
            dynamic_ncols=True,
        )
        try:
            yield bar.update
        finally:
            bar.close()

    return track


def choose_tracker(forced: bool, stream: TextIO | None = None) -> Track:
    """``--progress`` forces a bar; otherwise one appears only for a person at a terminal.

    "A person at a terminal" is stderr being a TTY while stdout is not (output going
    to a file or a pager): when both are the same terminal, a bar would tear through
    the lines being printed.
    """
    stream = stream or sys.stderr
    if forced:
        return tqdm_progress(0.0, stream)
    if _isatty(stream) and not _isatty(sys.stdout):
        return tqdm_progress(AUTO_DELAY_S, stream)
    return no_progress


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False

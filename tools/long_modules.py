"""Name the project's modules of over about 800 lines: a note, never a failure.

Modules are cut at concepts, not at a length (ruff's C901 and PLR0915 keep functions small);
a module this long is worth a look for a second concept inside it. ``make lint`` prints this.
"""

from __future__ import annotations

import sys
from pathlib import Path

LONG = 800
ROOT = Path(__file__).resolve().parents[1]


def long_modules(root: Path = ROOT, long: int = LONG) -> list[tuple[str, int]]:
    """``(path, lines)`` of the modules in daskgpu/, pipelines/ and benchmarks/ over ``long``."""
    found = []
    for folder in ("daskgpu", "pipelines", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            lines = path.read_text().count("\n")
            if lines > long:
                found.append((str(path.relative_to(root)), lines))
    return found


if __name__ == "__main__":
    for path, lines in long_modules():
        print(f"note: {path} has {lines} lines (over about {LONG}): one concept, or two?")
    sys.exit(0)

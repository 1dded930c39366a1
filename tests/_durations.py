"""Seconds per test file, for handing files to the two xdist workers heaviest first.

``--dist loadfile`` sends whole files to the workers in the order of the collection, but
pytest-xdist first re-sorts them by test count, so a file with few, heavy tests (``test_sysid.py``,
``test_simulate.py``) often came last and one worker idled ~15 s while the other finished it.
pyproject's ``--no-loadscope-reorder`` keeps the collection order, and ``conftest.py`` orders
the files by the cold seconds stored in ``durations.json`` (largest first: a greedy longest-first
schedule). A stale or missing entry only costs balance, never a result.

Refresh after a cold run of each tier (``rm -rf .pytest_cache/jaxmech-xla`` first)::

    python -m pytest -q --durations=0 > default.log
    python -m pytest -q -m slow -n 2 --dist loadfile --durations=0 > slow.log
    python tests/_durations.py default.log slow.log
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PATH = Path(__file__).with_name("durations.json")
UNKNOWN = 10.0  # seconds assumed for a file not in the table (a new file goes mid-queue)
_LINE = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(tests/[^:]+)::")


def file_seconds(markexpr: str) -> dict[str, float]:
    """Seconds per file name for the tier a ``-m`` expression selects: the default tier for
    ``not slow``, the slow tier for ``slow``, their sum for anything else (both tiers)."""
    table = json.loads(PATH.read_text())
    expr = " ".join(markexpr.split())
    if expr in ("not slow", "slow"):
        return table["default" if expr == "not slow" else "slow"]
    names = set(table["default"]) | set(table["slow"])
    return {n: table["default"].get(n, 0.0) + table["slow"].get(n, 0.0) for n in names}


def parse(log: str) -> dict[str, float]:
    """Summed setup, call and teardown seconds per file from ``--durations=0`` output."""
    out: dict[str, float] = {}
    for line in log.splitlines():
        m = _LINE.match(line)
        if m:
            name = Path(m.group(2)).name
            out[name] = out.get(name, 0.0) + float(m.group(1))
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/_durations.py DEFAULT_TIER_LOG SLOW_TIER_LOG")
    default, slow = (parse(Path(p).read_text()) for p in sys.argv[1:])
    PATH.write_text(json.dumps({"default": default, "slow": slow}, indent=1) + "\n")
    print(f"wrote {PATH}: {len(default)} default-tier files, {len(slow)} slow-tier files")

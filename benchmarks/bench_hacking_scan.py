"""The trainer-side hacking scan's cost on long attribute chains, beside `ast.parse` of the same code (its floor),
measured in the same run.

Completions of about 11 KB made of attribute chains as long as the parser takes (`sys.a.a...._getframe`): the scan
was quadratic in a chain's length (each node walked down to its root anew: 10-35 s for 8 such completions); it now
finds each node's root once, so its cost stays a small multiple of parsing.

    python benchmarks/bench_hacking_scan.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gspo_recipes.rewards.code.hacking import scan_code  # noqa: E402


def chains(n_lines: int, length: int) -> str:
    return "import sys\n" + "".join(f"x{i} = sys{'.a' * length}._getframe\n" for i in range(n_lines))


def median_seconds(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'completion':<28} {'chars':>7} {'parse s':>9} {'scan s':>9} {'scan/parse':>11}")
    for n_lines, length in ((6, 900), (3, 1800), (60, 90)):
        source = chains(n_lines, length)
        assert scan_code(source) == {"frame_access"}
        parse_s = median_seconds(lambda source=source: ast.parse(source), args.repeats)
        scan_s = median_seconds(lambda source=source: scan_code(source), args.repeats)
        name = f"{n_lines} chains of {length}"
        print(f"{name:<28} {len(source):>7} {parse_s:>9.4f} {scan_s:>9.4f} {scan_s / parse_s:>10.1f}x")


if __name__ == "__main__":
    main()

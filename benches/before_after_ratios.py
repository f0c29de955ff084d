"""Ratios of a before/after run of the session benchmark (benches/before_after.sh): for each
column, worker count and metric, B's median over A's in each pair, then the median of those
ratios and their range. Below 1 means B (after) is faster.

Usage: python3 benches/before_after_ratios.py A_TREE B_TREE PAIRS
"""

import csv
import statistics
import sys
from pathlib import Path


def medians(path: Path) -> dict[tuple[str, str, str], float]:
    """Each (column, workers, metric) of one run's CSV, in nanoseconds per operation."""
    with path.open() as f:
        return {
            (row["column"], row["workers"], row["metric"]): float(row["median"])
            for row in csv.DictReader(f)
            if row["unit"] == "ns" and row["median"] not in ("", "nan")
        }


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    before, after, pairs = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    ratios: dict[tuple[str, str, str], list[float]] = {}
    for pair in range(1, pairs + 1):
        name = f"target/bench/before_after_{pair}.csv"
        a, b = medians(before / name), medians(after / name)
        for key in a.keys() & b.keys():
            ratios.setdefault(key, []).append(b[key] / a[key])
    print(f"B/A, median over {pairs} pairs [lowest, highest]:")
    for column, workers, metric in sorted(ratios, key=lambda k: (k[0], int(k[1]), k[2])):
        r = ratios[(column, workers, metric)]
        print(
            f"  {column:16} N={workers}  {metric:28} {statistics.median(r):.2f}"
            f"  [{min(r):.2f}, {max(r):.2f}]"
        )


if __name__ == "__main__":
    main()

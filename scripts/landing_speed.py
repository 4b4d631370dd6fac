"""Landing speed: lines per second of :func:`bq_platform.lib.landing.producer.land.land_file` on one process.

Writes the bundled real logs (81,744 lines) ``--copies`` times each as gzip files, like rotated
logs (``--plain``: uncompressed), copy ``i`` with its hosts prefixed ``c<i>-`` so that no two
files land the same objects, then times landing them all into a fresh local object store, as
``bq-platform land`` does (writing the files is not timed). 25 copies give 2,043,600 lines
(216 MB uncompressed), the input of issue 9, whose target is at least 150k lines/s.

Usage: ``.venv/bin/python scripts/landing_speed.py [--copies 25] [--plain] [--profile]``.
Prints one JSON document; ``--profile`` also prints the top of a cProfile of the timed part.
"""

import argparse
import cProfile
import gzip
import json
import pstats
import tempfile
import time
from pathlib import Path

from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.storage.local import LocalObjectStore

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOGS = REPO.parent / "shared" / "data" / "access_logs"


def write_copies(logs: Path, out: Path, copies: int, compress: bool) -> list[tuple[str, Path, int]]:
    """Write ``copies`` variants of every bundled log; returns ``(site, path, lines)``."""
    inputs = []
    for site_dir in sorted(p for p in logs.iterdir() if p.is_dir()):
        for path in sorted(site_dir.glob("*.gz")):
            lines = gzip.decompress(path.read_bytes()).splitlines(keepends=True)
            for copy in range(copies):
                target = out / f"{site_dir.name}-{copy:03d}.log{'.gz' if compress else ''}"
                prefix = b"c%d-" % copy
                data = b"".join(prefix + line for line in lines)
                target.write_bytes(gzip.compress(data, compresslevel=6) if compress else data)
                inputs.append((site_dir.name, target, len(lines)))
    return inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=25)
    parser.add_argument("--logs", type=Path, default=DEFAULT_LOGS)
    parser.add_argument("--plain", action="store_true", help="plain inputs (default: gzip)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bqp-land-") as tmp:
        inputs = write_copies(args.logs, Path(tmp), args.copies, compress=not args.plain)
        store = LocalObjectStore(Path(tmp) / "lake")
        profiler = cProfile.Profile() if args.profile else None
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        landed = 0
        for site, path, _lines in inputs:
            landed += sum(f.manifest.lines for f in land_file(store, site, path))
        if profiler:
            profiler.disable()
        seconds = time.perf_counter() - started
        expected = sum(n for _, _, n in inputs)
        if landed != expected:
            raise SystemExit(f"landed {landed} lines, expected {expected}")
        print(
            json.dumps(
                {
                    "files": len(inputs),
                    "lines": landed,
                    "input": "plain" if args.plain else "gzip",
                    "input_bytes": sum(p.stat().st_size for _, p, _ in inputs),
                    "seconds": round(seconds, 2),
                    "lines_per_second": round(landed / seconds),
                },
                indent=1,
            )
        )
        if profiler:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()

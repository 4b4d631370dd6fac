"""SYNTHETIC access logs for benchmarks only: the real logs' mix, scaled to any size.

Nothing this script writes is real traffic. It learns the mix of the bundled real logs
(``../shared/data/access_logs/<site>/*.log.gz``, see ``../shared/data/README.md``) and writes as
many lines as asked, deterministically (same arguments and seed, same bytes):

- **requests, status codes, bytes, page/asset share**: each synthetic line is a real line's
  ``(request, status, bytes)`` drawn at random with replacement from its template site (a
  bootstrap sample), so the joint mix of paths, methods, pages versus images, status codes
  and sizes is the real one;
- **sites**: ``--sites`` synthetic publishers named ``syn<k>.<real site>``, alternating over the
  real sites; each takes the real site's share of the lines;
- **visitors**: the template's client of the drawn line, renamed to a synthetic IPv4 address
  per site (``10.0.0.0/8`` upwards); the pool grows with the lines, so lines per visitor stay
  as in the real log;
- **arrival pattern**: lines per UTC hour of day follow the real logs' hourly profile (summed
  over the real sites; hours they miss get the quietest real hour's share); within an hour the
  timestamps are uniform and sorted.

It writes ``<out>/<site>/<site>-<YYYYMMDD>.log.gz`` (one gzip file per site and UTC day, lines in
time order, Common or Combined Log Format, zone ``+0000``) and ``<out>/synthetic.json`` with the
parameters and totals. ``bq-platform land-tree <out>`` lands it (``land-tree`` takes the folder
name as the site and ignores files at the top).

Usage::

    .venv/bin/python benchmarks/synthetic_logs.py OUT --lines-per-hour 28383 --days 3 --sites 50
"""

import argparse
import collections
import dataclasses
import datetime as dt
import gzip
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOGS = REPO.parent / "shared" / "data" / "access_logs"
DEFAULT_START = dt.date(1995, 9, 1)  # after the real logs; inside the default partitions
#: One "1x" of the benchmark (the real logs x 25 = 2,043,600 lines)
#: as 3 days of 50 sites: 28,383 lines per hour (2,043,576 lines).
LINES_PER_HOUR_1X = 28_383
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: User agents of Combined-format output; synthetic, no real log carries these.
_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) synthetic-benchmark/1.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) synthetic-benchmark/1.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) synthetic-benchmark/1.0",
)


@dataclasses.dataclass(frozen=True)
class SiteMix:
    """What is learned from one real site's log.

    Attributes:
        site: the real site (folder name).
        records: ``(request, status, bytes, client index)`` of every parseable line.
        clients: distinct clients in the log.
    """

    site: str
    records: list[tuple[str, str, str, int]]
    clients: int


@dataclasses.dataclass(frozen=True)
class Mix:
    """The real logs' mix: per-site records and the UTC hour-of-day profile (24 weights)."""

    sites: list[SiteMix]
    hourly_profile: list[float]


def learn_mix(access_logs: Path) -> Mix:
    """Read the real logs under ``access_logs/<site>/*.log.gz`` and learn their mix.

    Raises:
        FileNotFoundError: if there is no ``<site>/*.log.gz`` under ``access_logs``.
    """
    sys.path.insert(0, str(REPO))
    from bq_platform.lib.core import logformat as lf

    sites, by_hour = [], collections.Counter()
    for site_dir in sorted(p for p in access_logs.iterdir() if p.is_dir()):
        clients: dict[str, int] = {}
        records = []
        for path in sorted(site_dir.glob("*.log.gz")):
            for raw in gzip.decompress(path.read_bytes()).split(b"\n"):
                parsed = lf.parse_line(raw.decode("utf-8", errors="replace"))
                if parsed.reason is not None or parsed.timestamp is None:
                    continue
                client = clients.setdefault(parsed.host or "-", len(clients))
                bytes_ = "-" if parsed.response_bytes is None else str(parsed.response_bytes)
                records.append((parsed.request or "", str(parsed.status), bytes_, client))
                by_hour[parsed.timestamp.astimezone(dt.UTC).hour] += 1
        if records:
            sites.append(SiteMix(site_dir.name, records, len(clients)))
    if not sites:
        raise FileNotFoundError(f"no <site>/*.log.gz with parseable lines under {access_logs}")
    quietest = min(v for v in by_hour.values() if v)
    return Mix(sites, [float(by_hour.get(h) or quietest) for h in range(24)])


def split_exact(total: int, weights: list[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder): sums to ``total``."""
    scale = total / sum(weights)
    shares = [w * scale for w in weights]
    out = [int(s) for s in shares]
    order = sorted(range(len(weights)), key=lambda i: (out[i] - shares[i], i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def _ipv4(number: int) -> str:
    number = 0x0A000000 + number
    return f"{number >> 24 & 255}.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"


def generate(
    mix: Mix,
    out: Path,
    *,
    lines_per_hour: int,
    days: int,
    sites: int,
    start: dt.date = DEFAULT_START,
    combined: bool = False,
    seed: int = 0,
) -> dict:
    """Write the synthetic logs (see the module docstring); returns what ``synthetic.json`` holds.

    Args:
        mix: from :func:`learn_mix`.
        out: output folder (created; existing files of the same names are replaced).
        lines_per_hour: lines per UTC hour over all sites, on average over the day (the hourly
            profile moves lines between hours; the day has exactly ``24 * lines_per_hour``).
        days: UTC days, from ``start``.
        sites: synthetic sites.
        start: first UTC day.
        combined: Combined Log Format (adds ``"-"`` referrer and a synthetic user agent).
        seed: random seed.
    """
    rng = random.Random(seed)
    templates = [mix.sites[k % len(mix.sites)] for k in range(sites)]
    names = [f"syn{k:03d}.{t.site}" for k, t in enumerate(templates)]
    real_lines = {s.site: len(s.records) for s in mix.sites}
    copies = collections.Counter(t.site for t in templates)
    site_weights = [real_lines[t.site] / copies[t.site] for t in templates]
    day_lines = 24 * lines_per_hour
    per_site_day = split_exact(day_lines, site_weights)
    # visitor pool per site: the template's clients, times the scale-up (lines per visitor kept)
    replicas = [
        max(1, round(n / len(t.records))) for t, n in zip(templates, per_site_day, strict=True)
    ]
    totals = collections.Counter()
    for d in range(days):
        day = start + dt.timedelta(days=d)
        handles = []
        for name in names:
            folder = out / name
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{name}-{day:%Y%m%d}.log.gz"
            handles.append(gzip.open(path, "wt", compresslevel=6, encoding="utf-8", newline=""))
        try:
            for hour, n_hour in enumerate(split_exact(day_lines, mix.hourly_profile)):
                stamp = f"{day.day:02d}/{_MONTHS[day.month - 1]}/{day.year}:{hour:02d}:"
                for k, n in enumerate(split_exact(n_hour, site_weights)):
                    template, copies_k = templates[k], replicas[k]
                    seconds = sorted(rng.randrange(3600) for _ in range(n))
                    drawn = rng.choices(template.records, k=n)
                    lines = []
                    for s, (request, status, bytes_, client) in zip(seconds, drawn, strict=True):
                        visitor = client + template.clients * int(rng.random() * copies_k)
                        host = _ipv4((k << 20) + visitor % (1 << 20))
                        when = f"{stamp}{s // 60:02d}:{s % 60:02d} +0000"
                        line = f'{host} - - [{when}] "{request}" {status} {bytes_}'
                        if combined:
                            line += f' "-" "{_AGENTS[client % len(_AGENTS)]}"'
                        lines.append(line)
                    if lines:
                        handles[k].write("\n".join(lines) + "\n")
                    totals[names[k]] += n
        finally:
            for handle in handles:
                handle.close()
    summary = {
        "synthetic": True,
        "note": "benchmark input generated by benchmarks/synthetic_logs.py; not real traffic",
        "lines_per_hour": lines_per_hour,
        "days": days,
        "start": start.isoformat(),
        "sites": sites,
        "format": "combined" if combined else "common",
        "seed": seed,
        "lines": sum(totals.values()),
        "lines_per_site": dict(sorted(totals.items())),
        "learned_from": sorted(real_lines),
    }
    (out / "synthetic.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output folder (<out>/<site>/*.log.gz)")
    parser.add_argument("--lines-per-hour", type=int, default=LINES_PER_HOUR_1X)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--sites", type=int, default=50)
    parser.add_argument("--start", type=dt.date.fromisoformat, default=DEFAULT_START)
    parser.add_argument("--format", choices=("common", "combined"), default="common")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logs", type=Path, default=DEFAULT_LOGS, help="real logs to learn from")
    args = parser.parse_args()
    started = time.monotonic()
    summary = generate(
        learn_mix(args.logs),
        args.out,
        lines_per_hour=args.lines_per_hour,
        days=args.days,
        sites=args.sites,
        start=args.start,
        combined=args.format == "combined",
        seed=args.seed,
    )
    print(
        f"wrote {summary['lines']:,} synthetic lines ({args.sites} sites, {args.days} days) "
        f"to {args.out} in {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

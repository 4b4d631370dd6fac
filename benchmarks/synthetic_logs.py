"""SYNTHETIC access logs for benchmarks only: the real logs' mix, scaled to any size.

Nothing this script writes is real traffic. It learns the mix of the bundled real logs
(``../shared/data/access_logs/<site>/*.log.gz``, see ``../shared/data/README.md``) and the user
agents of the real modern Combined logs (``../shared/data/modern_logs/<site>/*.log.gz``, same
README), and writes as many lines as asked, deterministically (same arguments and seed, same
bytes):

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
  timestamps are uniform and sorted;
- **user agents and referrers** (Combined Log Format, the default): each synthetic visitor has
  one user agent, drawn from the modern logs' user agents weighted by their lines there (every
  real line one vote; ``-`` included), so robots and browsers keep the real share of lines and
  the same visitor keeps its user agent over hours and days; each line's referrer is drawn
  from the modern logs' referrers, weighted the same way. Both fields are written as the real
  lines wrote them (escapes kept). These draws use a random generator of their own, so the
  requests, statuses, visitors and times are those of the Common Log Format output.

It writes ``<out>/<site>/<site>-<YYYYMMDD>.log.gz`` (one gzip file per site and UTC day, lines in
time order, Combined or Common Log Format, zone ``+0000``) and ``<out>/synthetic.json`` with the
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
import itertools
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOGS = REPO.parent / "shared" / "data" / "access_logs"
#: The real Combined logs the user agents come from (``make run`` lands the same folder).
DEFAULT_MODERN_LOGS = REPO.parent / "shared" / "data" / "modern_logs"
DEFAULT_START = dt.date(1995, 9, 1)  # after the real logs; inside the default partitions
#: One "1x" of the benchmark (the real logs x 25 = 2,043,600 lines)
#: as 3 days of 50 sites: 28,383 lines per hour (2,043,576 lines).
LINES_PER_HOUR_1X = 28_383
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


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


@dataclasses.dataclass(frozen=True)
class FieldMix:
    """The user agents and referrers of real Combined lines, each with the lines it was seen on.

    Attributes:
        agents: distinct user-agent fields as written (escapes kept; ``-`` for none), most
            frequent first, ties in text order.
        agent_lines: lines per entry of ``agents``.
        referrers: distinct referrer fields, in the same order and form.
        referrer_lines: lines per entry of ``referrers``.
        sources: the files read, relative to the folder given.
    """

    agents: list[str]
    agent_lines: list[int]
    referrers: list[str]
    referrer_lines: list[int]
    sources: list[str]


def _ranked(counts: collections.Counter) -> tuple[list[str], list[int]]:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [k for k, _ in ranked], [v for _, v in ranked]


def learn_user_agents(modern_logs: Path) -> FieldMix:
    """Read the real Combined logs under ``modern_logs/<site>/*.log.gz`` and count their user
    agents and referrers (lines that are not Combined Log Format are skipped).

    Raises:
        FileNotFoundError: if there is no such log, or none has a Combined line; the message
            names the folder and where the logs come from.
    """
    sys.path.insert(0, str(REPO))
    from bq_platform.lib.core import logformat as lf

    paths = sorted(modern_logs.glob("*/*.log.gz")) if modern_logs.is_dir() else []
    agents, referrers = collections.Counter(), collections.Counter()
    for path in paths:
        for raw in gzip.decompress(path.read_bytes()).split(b"\n"):
            match = lf.LINE_RE.fullmatch(lf.clean_line(raw.decode("utf-8", errors="replace")))
            if match is None or match.group(10) is None:
                continue
            referrers[match.group(9)] += 1
            agents[match.group(10)] += 1
    if not agents:
        raise FileNotFoundError(
            f"no real Combined logs (<site>/*.log.gz with user agents) under {modern_logs}: the "
            "benchmark draws its user agents from ../shared/data/modern_logs (see "
            "../shared/data/README.md); give the folder with --modern-logs"
        )
    agent_texts, agent_lines = _ranked(agents)
    referrer_texts, referrer_lines = _ranked(referrers)
    return FieldMix(
        agent_texts,
        agent_lines,
        referrer_texts,
        referrer_lines,
        [str(p.relative_to(modern_logs)) for p in paths],
    )


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
    fields: FieldMix | None = None,
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
        fields: the real user agents and referrers (:func:`learn_user_agents`): Combined Log
            Format lines with them; None: Common Log Format.
        seed: random seed.
    """
    rng = random.Random(seed)
    field_rng = random.Random(f"user-agents-{seed}")  # apart: the Common mix stays the same
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
    # one user agent per synthetic visitor (host number), drawn once, weighted by real lines
    visitor_agents: list[list[int]] = []
    if fields is not None:
        agent_cum = list(itertools.accumulate(fields.agent_lines))
        referrer_cum = list(itertools.accumulate(fields.referrer_lines))
        for t, copies_k in zip(templates, replicas, strict=True):
            pool = min(t.clients * copies_k, 1 << 20)
            visitor_agents.append(
                field_rng.choices(range(len(fields.agents)), cum_weights=agent_cum, k=pool)
            )
    agents_used: set[int] = set()
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
                    if fields is not None:
                        referrers = field_rng.choices(
                            fields.referrers, cum_weights=referrer_cum, k=n
                        )
                    lines = []
                    for i, (s, (request, status, bytes_, client)) in enumerate(
                        zip(seconds, drawn, strict=True)
                    ):
                        visitor = client + template.clients * int(rng.random() * copies_k)
                        number = visitor % (1 << 20)
                        host = _ipv4((k << 20) + number)
                        when = f"{stamp}{s // 60:02d}:{s % 60:02d} +0000"
                        line = f'{host} - - [{when}] "{request}" {status} {bytes_}'
                        if fields is not None:
                            agent = visitor_agents[k][number % len(visitor_agents[k])]
                            agents_used.add(agent)
                            line += f' "{referrers[i]}" "{fields.agents[agent]}"'
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
        "format": "common" if fields is None else "combined",
        "seed": seed,
        "lines": sum(totals.values()),
        "lines_per_site": dict(sorted(totals.items())),
        "learned_from": sorted(real_lines),
    }
    if fields is not None:
        summary["user_agents"] = len(agents_used)
        summary["user_agents_learned_from"] = fields.sources
        summary["user_agents_available"] = len(fields.agents)
    (out / "synthetic.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output folder (<out>/<site>/*.log.gz)")
    parser.add_argument("--lines-per-hour", type=int, default=LINES_PER_HOUR_1X)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--sites", type=int, default=50)
    parser.add_argument("--start", type=dt.date.fromisoformat, default=DEFAULT_START)
    parser.add_argument("--format", choices=("combined", "common"), default="combined")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logs", type=Path, default=DEFAULT_LOGS, help="real logs to learn from")
    parser.add_argument(
        "--modern-logs",
        type=Path,
        default=DEFAULT_MODERN_LOGS,
        help="real Combined logs to draw the user agents from (--format combined)",
    )
    args = parser.parse_args()
    started = time.monotonic()
    fields = learn_user_agents(args.modern_logs) if args.format == "combined" else None
    summary = generate(
        learn_mix(args.logs),
        args.out,
        lines_per_hour=args.lines_per_hour,
        days=args.days,
        sites=args.sites,
        start=args.start,
        fields=fields,
        seed=args.seed,
    )
    print(
        f"wrote {summary['lines']:,} synthetic lines ({args.sites} sites, {args.days} days) "
        f"to {args.out} in {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

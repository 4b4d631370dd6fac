"""The bench's synthetic logs (benchmarks/synthetic_logs.py): Combined lines whose user agents
and referrers come from the real modern logs, deterministic per seed, with the rest of the mix
of the Common Log Format output."""

import collections
import gzip
import re
from pathlib import Path

import pytest
import synthetic_logs

from bq_platform.lib.traffic.crawlers import crawler_pattern

MODERN_LOGS = synthetic_logs.DEFAULT_MODERN_LOGS
#: host, the Common part, then "referrer" "user agent" as the generator writes them.
COMBINED = re.compile(r'^(\S+) (.*\d{3} (?:\d+|-)) "(.*)" "(.*)"$')


def _mix() -> synthetic_logs.Mix:
    records = [
        ("GET / HTTP/1.0", "200", "1024", 0),
        ("GET /a.gif HTTP/1.0", "200", "50", 1),
        ("GET /news.html HTTP/1.0", "304", "-", 2),
        ("POST /cgi-bin/form HTTP/1.0", "200", "10", 3),
    ]
    site = synthetic_logs.SiteMix("example.org", records, clients=4)
    return synthetic_logs.Mix([site], [1.0] * 24)


def _lines(out: Path) -> list[str]:
    return [
        line
        for path in sorted(out.glob("*/*.log.gz"))
        for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()
    ]


def _generate(out: Path, seed: int, fields: synthetic_logs.FieldMix | None) -> dict:
    return synthetic_logs.generate(
        _mix(), out, lines_per_hour=400, days=1, sites=2, fields=fields, seed=seed
    )


@pytest.fixture(scope="module")
def fields() -> synthetic_logs.FieldMix:
    return synthetic_logs.learn_user_agents(MODERN_LOGS)


def test_the_user_agents_and_referrers_are_the_real_modern_logs_fields(fields, tmp_path) -> None:
    summary = _generate(tmp_path / "out", 0, fields)
    real = "\n".join(_lines(MODERN_LOGS))  # every real line, as written
    lines = _lines(tmp_path / "out")
    assert summary["format"] == "combined" and len(lines) == summary["lines"] == 24 * 400
    agents, per_visitor = set(), collections.defaultdict(set)
    for line in lines:
        host, _, referrer, agent = COMBINED.match(line).groups()
        assert f'"{agent}"' in real and f'"{referrer}"' in real
        agents.add(agent)
        per_visitor[host].add(agent)
    assert summary["user_agents"] == len(agents) > 20  # many distinct user agents
    assert all(len(a) == 1 for a in per_visitor.values())  # a visitor keeps its user agent
    # real robots and real browsers both appear
    robots = {a for a in agents if crawler_pattern(a) is not None}
    assert robots and agents - robots


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_agents(
    fields, tmp_path
) -> None:
    _generate(tmp_path / "a", 7, fields)
    _generate(tmp_path / "b", 7, fields)
    _generate(tmp_path / "c", 8, fields)
    assert _lines(tmp_path / "a") == _lines(tmp_path / "b")
    assert _lines(tmp_path / "a") != _lines(tmp_path / "c")


def test_the_combined_lines_keep_the_common_mix(fields, tmp_path) -> None:
    _generate(tmp_path / "common", 3, None)
    _generate(tmp_path / "combined", 3, fields)
    common = _lines(tmp_path / "common")
    stripped = [" ".join(COMBINED.match(x).group(1, 2)) for x in _lines(tmp_path / "combined")]
    assert COMBINED.match(common[0]) is None  # Common Log Format: no referrer, no user agent
    assert stripped == common


def test_user_agents_are_weighted_by_the_lines_they_were_seen_on(tmp_path) -> None:
    site = tmp_path / "modern" / "example.org"
    site.mkdir(parents=True)
    stamp = "[22/Jan/2019:03:56:14 +0330]"
    bot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
    browser = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
    lines = [f'1.2.3.4 - - {stamp} "GET / HTTP/1.1" 200 5 "-" "{bot}"'] * 3
    lines += [f'5.6.7.8 - - {stamp} "GET /a HTTP/1.1" 200 5 "https://example.org/" "{browser}"']
    lines += [f'5.6.7.8 - - {stamp} "GET /b HTTP/1.1" 200 5 "-" "-"']
    lines += [f'9.9.9.9 - - {stamp} "GET / HTTP/1.0" 200 5']  # Common: no user agent to count
    (site / "access.log.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
    learned = synthetic_logs.learn_user_agents(tmp_path / "modern")
    assert list(zip(learned.agents, learned.agent_lines, strict=True)) == [
        (bot, 3),
        ("-", 1),
        (browser, 1),
    ]
    assert list(zip(learned.referrers, learned.referrer_lines, strict=True)) == [
        ("-", 4),
        ("https://example.org/", 1),
    ]
    assert learned.sources == ["example.org/access.log.gz"]


def test_missing_modern_logs_fail_with_the_folder_and_what_to_do(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="--modern-logs") as raised:
        synthetic_logs.learn_user_agents(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(raised.value)

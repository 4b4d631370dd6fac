"""The bench's build without the traffic classification (``build_hours(classify=False)``, run by
benchmarks/build_only.py): the same pages and columns as the classified build, with the traffic
columns unset (``traffic_class`` a marker no check counts) and no user agent parsed."""

import datetime as dt
import gzip

import synthetic_logs

from bq_platform.lib.hourly_build import traffic
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.schema import TRAFFIC_COLUMNS
from bq_platform_tests.lib.build_inputs import KEY, land
from bq_platform_tests.lib.built_slice import read_parquet

HOUR = dt.datetime(1995, 9, 1, 0, tzinfo=dt.UTC)
TRAFFIC = [c.name for c in TRAFFIC_COLUMNS]
#: Real 1995 requests: pages and not, a redirect, a POST.
RECORDS = [
    ("GET / HTTP/1.0", "200", "1024", 0),
    ("GET /a.gif HTTP/1.0", "200", "50", 1),
    ("GET /news.html HTTP/1.0", "304", "-", 2),
    ("GET /docs HTTP/1.0", "302", "-", 3),
    ("POST /cgi-bin/form HTTP/1.0", "200", "10", 4),
]


def _build(spark, root, lines: list[bytes], classify: bool) -> tuple[list[dict], list]:
    store = LocalObjectStore(root)
    land(store, "example.org", HOUR, lines)
    manifests = build_hours(
        spark, store, [HOUR], attempt_id="bench-1", visitor_key=KEY, classify=classify
    )
    keys = [k for m in manifests for k in m.full_files]
    rows = sorted(read_parquet(store, keys).to_pylist(), key=lambda r: r["event_id"])
    return rows, [c for m in manifests for c in m.counts]


def test_the_build_without_classification_differs_only_in_the_traffic_columns(
    spark, tmp_path, monkeypatch
) -> None:
    fields = synthetic_logs.learn_user_agents(synthetic_logs.DEFAULT_MODERN_LOGS)
    mix = synthetic_logs.Mix([synthetic_logs.SiteMix("example.org", RECORDS, 5)], [1.0] * 24)
    synthetic_logs.generate(
        mix, tmp_path / "logs", lines_per_hour=300, days=1, sites=1, fields=fields
    )
    (path,) = (tmp_path / "logs").glob("*/*.log.gz")
    lines = [x for x in gzip.decompress(path.read_bytes()).split(b"\n") if b"1995:00:" in x]
    classified, counts = _build(spark, tmp_path / "with", lines, classify=True)
    parsed: list = []
    monkeypatch.setattr(traffic, "parse_families", lambda agent: parsed.append(agent))
    unclassified, bare_counts = _build(spark, tmp_path / "without", lines, classify=False)
    assert parsed == []  # no user agent parsed
    assert classified and len(unclassified) == len(classified)
    assert all(r["traffic_class"] is not None for r in classified)
    assert {c.bot_pageviews for c in counts} != {0}
    for with_, without in zip(classified, unclassified, strict=True):
        assert {k: v for k, v in without.items() if k not in TRAFFIC} == {
            k: v for k, v in with_.items() if k not in TRAFFIC
        }
        assert [without[k] for k in TRAFFIC] == [traffic.UNCLASSIFIED] + [None] * (len(TRAFFIC) - 1)
    # what the identity check would then refuse: pages without a class
    assert [(c.pageviews, c.human_pageviews + c.bot_pageviews) for c in bare_counts] == [
        (c.pageviews, 0) for c in counts
    ]

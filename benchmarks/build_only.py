"""The hourly build alone, with or without the traffic classification: how the bench measures
what the classification costs.

It runs :func:`bq_platform.lib.hourly_build.build.build_hours` on a local lake whose logs are
landed, as ``python -m bq_platform.spark_apps.build_hours`` does (a session of its own, started
by PySpark, with the settings of the local environment: ``BQ_PLATFORM_SPARK_MASTER`` and the
driver memory, the visitor key, the lines per pass, the default classification thresholds),
and with ``--no-classify`` passes ``classify=False``: the same build without the traffic step
(:func:`bq_platform.lib.hourly_build.traffic.classify_pages`). Such a lake's pages have no
class; it is the bench's scratch copy and is never published.

Prints one JSON object as its last line: ``{"classify", "hours", "pageviews",
"human_pageviews", "bot_pageviews", "build_s"}`` (``build_s``: the build's wall seconds, the
session's start included).

Usage: ``python benchmarks/build_only.py LAKE FIRST_HOUR LAST_HOUR [--no-classify]``
(hours ``YYYY-MM-DDTHH``, both included; the logs landed under ``LAKE`` by ``land-tree``).
"""

import argparse
import json
import logging
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lake", type=Path, help="the local lake (<BQ_PLATFORM_HOME>/lake)")
    parser.add_argument("first", help="first UTC hour, YYYY-MM-DDTHH")
    parser.add_argument("last", help="last UTC hour (included)")
    parser.add_argument(
        "--no-classify",
        dest="classify",
        action="store_false",
        help="skip the traffic classification (the pages get no class: never publish them)",
    )
    parser.add_argument("--attempt-id", default="bench-build")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from bq_platform import settings
    from bq_platform.lib.core.partition_window import HourWindow
    from bq_platform.lib.hourly_build.application import hour_range, own_session
    from bq_platform.lib.hourly_build.build import build_hours
    from bq_platform.lib.hourly_build.read import DEFAULT_LINES_PER_PASS
    from bq_platform.lib.hourly_build.spark import spark_config
    from bq_platform.lib.storage.local import LocalObjectStore
    from bq_platform.lib.traffic.thresholds import ClassificationThresholds

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    log = logging.getLogger("bq_platform.bench.build_only")
    log.setLevel(logging.INFO)
    config = spark_config(
        settings.spark_master(),
        verbose=settings.spark_verbose(),
        driver_memory=settings.spark_driver_memory(),
    )
    started = time.monotonic()
    with own_session(config) as session:
        manifests = build_hours(
            session,
            LocalObjectStore(str(args.lake)),
            hour_range(args.first, args.last),
            attempt_id=args.attempt_id,
            visitor_key=settings.visitor_key("local"),
            window=HourWindow.until_now(settings.first_hour()),
            log=log,
            lines_per_pass=settings.pipeline_settings("local").get(
                "lines_per_pass", DEFAULT_LINES_PER_PASS
            ),
            thresholds=ClassificationThresholds(),
            classify=args.classify,
        )
    counts = [c for m in manifests for c in m.counts]
    result = {
        "classify": args.classify,
        "hours": len(manifests),
        "pageviews": sum(c.pageviews for c in counts),
        "human_pageviews": sum(c.human_pageviews for c in counts),
        "bot_pageviews": sum(c.bot_pageviews for c in counts),
        "build_s": round(time.monotonic() - started, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

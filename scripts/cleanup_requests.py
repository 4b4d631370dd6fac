"""The attempt cleanup's requests on gcp-storage-emulator: the full pass against the record pass.

For each history of N days it fills a bucket as hourly builds would (each day built once by its
own attempt: 24 hours x 3 folders, and the hour manifests), then rebuilds the last day with
another attempt, which records the 24 units it displaced (:mod:`bq_platform.lib.build.superseded`).
It then runs, one retention later, either the full pass (:func:`retention.clean_attempts`,
after a first pass that sees the units) or the record pass (:func:`retention.clean_superseded`)
over a storage client whose HTTP session records every request, and prints per pass the
requests by kind, the emulator's seconds and what was deleted. The emulator's seconds are not
GCS's (it scans its whole bucket for each listing); the request counts are what GCS would see.

Usage: ``.venv/bin/python scripts/cleanup_requests.py [DAYS ...]`` (default ``3 30``); the
figures are in docs/PERFORMANCE.md, "The attempt cleanup follows the builds".
"""

import collections
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # bq_platform_tests is not installed; it lives in the repo
    sys.path.insert(0, str(REPO))

from bq_platform.lib import layout  # noqa: E402
from bq_platform.lib.storage.base import ObjectStore  # noqa: E402
from bq_platform.lib.storage.gcs import GCSObjectStore  # noqa: E402
from bq_platform.lib.build.retention import RETENTION, clean_attempts, clean_superseded  # noqa: E402
from bq_platform.lib.build.superseded import record_superseded  # noqa: E402
from bq_platform_tests.emulators import running_gcs_emulator  # noqa: E402
from bq_platform_tests.http_recording import RecordingSession  # noqa: E402
from bq_platform_tests.lib.build.test_retention import T0, manifest_of  # noqa: E402

FIRST_DAY = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def build(store: ObjectStore, attempt: str, day: int) -> None:
    """What a build of ``day`` leaves: one object in each of its 3 folders per hour, then the
    hour manifests naming them."""
    for h in range(24):
        hour = FIRST_DAY + dt.timedelta(days=day, hours=h)
        keys = tuple(f"{p}/part-0.parquet" for p in layout.attempt_hour_prefixes(attempt, hour))
        for key in keys:
            store.write_bytes(key, b"x")
        manifest = manifest_of(attempt, hour, keys)
        store.write_text(layout.hour_manifest_key(hour), manifest.to_json())


def fill(store: ObjectStore, days: int) -> None:
    """``days`` days built once each, then the last one rebuilt by ``rebuild``, recorded."""
    for day in range(days):
        build(store, f"d{day:04d}", day)
    last = days - 1
    build(store, "rebuild", last)
    hours = [FIRST_DAY + dt.timedelta(days=last, hours=h) for h in range(24)]
    units = [(f"d{last:04d}", layout.hour_label(hour)) for hour in hours]
    record_superseded(store, "rebuild", units, now=T0)


def kinds(session: RecordingSession) -> dict[str, int]:
    """The recorded requests by kind (objects.list, download, delete, other)."""
    counted: collections.Counter[str] = collections.Counter()
    for call in session.calls:
        if call.method == "DELETE":
            counted["deletions"] += 1
        elif call.method == "GET" and call.path.endswith("/o"):
            counted["listings"] += 1
        elif call.method == "GET" and call.query.get("alt") == "media":
            counted["downloads"] += 1
        else:
            counted[f"{call.method} other"] += 1
    return dict(counted)


def main() -> None:
    histories = [int(a) for a in sys.argv[1:]] or [3, 30]
    with tempfile.TemporaryDirectory() as tmp, running_gcs_emulator(Path(tmp)) as emulator:
        for days in histories:
            for mode in ("full", "record"):
                session = RecordingSession()
                client = emulator.client(session)
                bucket = f"cleanup-{days}-{mode}"
                client.create_bucket(bucket)
                store = GCSObjectStore(bucket, client, prefix="lake")
                fill(store, days)
                if mode == "full":
                    clean_attempts(store, now=T0)  # the first sighting
                session.calls.clear()
                started = time.monotonic()
                if mode == "full":
                    report = clean_attempts(store, now=T0 + RETENTION)
                else:
                    report = clean_superseded(store, now=T0 + RETENTION)
                seconds = time.monotonic() - started
                print(
                    f"{days} days, {mode} pass: {len(session.calls)} requests {kinds(session)}; "
                    f"deleted {len(report.deleted_units)} units, {report.deleted_objects} "
                    f"objects; {seconds:.2f} s on the emulator",
                    flush=True,
                )


if __name__ == "__main__":
    main()

"""Deterministic job IDs and the content fingerprints they are built from.

A job ID names *what* the job writes, *where*, and *from which content*:

    bqp_<kind>_<destination>_<partition>_<fingerprint[:20]>_g<generation>

- ``partition``: ``YYYYMMDD`` (day) or ``YYYYMMDDHH`` (hour);
- ``fingerprint``: hex SHA-256 of the content; an ID built without it can silently skip new
  data (apache/beam#28219);
- ``generation``: 0, bumped when a job with the same content failed and must be redone.

Job IDs and labels follow BigQuery's rules (:mod:`bq_platform.lib.warehouse.rules`).
"""

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping

from bq_platform.lib.core.hours import hour_id

JOB_ID_PREFIX = "bqp"
FINGERPRINT_CHARS = 20
_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
_PARTITION_RE = re.compile(r"^\d{8}(\d{2})?$")
_LABEL_BAD = re.compile(r"[^a-z0-9_\-]")


def sha256_json(payload: object) -> str:
    """Hex SHA-256 of ``payload`` serialized as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def input_fingerprint(checksums: Iterable[tuple[str, str]]) -> str:
    """Fingerprint of one hour's landed input: the set of ``(site, sha256)`` of its files
    (order and repeated deliveries do not change it)."""
    return sha256_json(sorted(set(checksums)))


def hour_fingerprint(
    input_fp: str, transform_version: str, key_id: str, sample_modulus: int, classifier: str
) -> str:
    """Content fingerprint of one hour's Parquet output, a pure function of these five
    arguments (Parquet bytes themselves are not reproducible). ``classifier`` is the traffic
    classifier's version with its thresholds
    (:func:`bq_platform.lib.traffic.version.classifier_version`): an upgrade of the crawler
    list or the user-agent rules, or another threshold, changes it."""
    return sha256_json(
        {
            "input": input_fp,
            "transform": transform_version,
            "key": key_id,
            "sample": sample_modulus,
            "classifier": classifier,
        }
    )


def day_fingerprint(hour_fingerprints: Mapping[str, str]) -> str:
    """Fingerprint of a day's publish: its hours (``YYYY-MM-DDTHH``) and their fingerprints."""
    return sha256_json(sorted(hour_fingerprints.items()))


def rollup_fingerprint(day_fp: str, rollup_version: str) -> str:
    """Fingerprint of a day's rollups: the day's fingerprint (:func:`day_fingerprint`, which
    covers its hours' fingerprints, hence the traffic classifier) and the rollups' version
    (``bq_platform.lib.daily_build.rollups.ROLLUP_VERSION``)."""
    return sha256_json({"day": day_fp, "rollup": rollup_version})


def hour_partition(hour: dt.datetime) -> str:
    """``YYYYMMDDHH`` of a UTC hour (:func:`bq_platform.lib.core.hours.hour_id`)."""
    return hour_id(hour)


def day_partition(day: dt.date) -> str:
    """``YYYYMMDD`` of a UTC date (the partition decorator's format)."""
    return day.strftime("%Y%m%d")


def job_id(
    kind: str, destination: str, partition: str, fingerprint: str, generation: int = 0
) -> str:
    """Build the deterministic job ID (format in the module docstring).

    Raises:
        ValueError: if a part is malformed (kind/destination not ``[A-Za-z0-9_]``, partition
            not YYYYMMDD[HH], fingerprint shorter than 20 hex digits, generation < 0).
    """
    if kind not in {"load", "copy"}:
        raise ValueError(f"job kind must be 'load' or 'copy', got {kind!r}")
    if not _NAME_RE.fullmatch(destination):
        raise ValueError(f"destination must be a bare table name, got {destination!r}")
    if not _PARTITION_RE.fullmatch(partition):
        raise ValueError(f"partition must be YYYYMMDD or YYYYMMDDHH, got {partition!r}")
    if not re.fullmatch(r"^[0-9a-f]{20,}$", fingerprint):
        raise ValueError("fingerprint must be at least 20 lowercase hex digits")
    if generation < 0:
        raise ValueError("generation must be >= 0")
    return (
        f"{JOB_ID_PREFIX}_{kind}_{destination}_{partition}_"
        f"{fingerprint[:FINGERPRINT_CHARS]}_g{generation}"
    )


def label_value(value: str) -> str:
    """Make ``value`` a valid BigQuery label value: lowercase, ``[a-z0-9_-]``, <= 63 chars."""
    return _LABEL_BAD.sub("_", value.lower())[:63]


def job_labels(asset: str, partition: str, run_id: str, fingerprint: str) -> dict[str, str]:
    """Labels every job carries: where it came from and what content it wrote."""
    return {
        "app": "bq_platform",
        "asset": label_value(asset),
        "partition": label_value(partition),
        "run_id": label_value(run_id),
        "fingerprint": label_value(fingerprint[: FINGERPRINT_CHARS * 2]),
    }

"""Where every piece of data lives inside the object store (local directory or GCS bucket).

One module owns the key layout so that the lander, the Spark build, the sensors and the
production adapters agree on it. Keys are relative, ``/``-separated, and never start with ``/``.

::

    landing/pageviews/site=<site>/hour=<YYYY-MM-DDTHH>/<sha256[:32]>.log.gz            landed file
    landing/pageviews/site=<site>/hour=<YYYY-MM-DDTHH>/<sha256[:32]>.manifest.json     written last
    staging/pageviews/attempt=<attempt_id>/full/hour=<YYYY-MM-DDTHH>/part-*.parquet   one attempt
    staging/pageviews/attempt=<attempt_id>/sample/hour=<YYYY-MM-DDTHH>/part-*.parquet
    deadletter/pageviews/attempt=<attempt_id>/hour=<YYYY-MM-DDTHH>/part-*.parquet     rejected lines
    staging/pageviews/hour=<YYYY-MM-DDTHH>/_MANIFEST.json     names the files that count

The hour is the UTC hour, formatted ``YYYY-MM-DDTHH`` (see :func:`hour_label`).
"""

import datetime as dt
import re

LANDING_PREFIX = "landing/pageviews"
STAGING_PREFIX = "staging/pageviews"
DEADLETTER_PREFIX = "deadletter/pageviews"

LANDED_DATA_SUFFIX = ".log.gz"
LANDED_MANIFEST_SUFFIX = ".manifest.json"
HOUR_MANIFEST_NAME = "_MANIFEST.json"

_SITE_RE = re.compile(r"^[a-z0-9][a-z0-9.\-_]{0,99}$")
_HOUR_LABEL_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}$")


def validate_site(site: str) -> str:
    """Return ``site`` unchanged if it is a valid site name (lowercase host-like, <= 100 chars).

    Raises:
        ValueError: if the name has characters that cannot appear in an object key or a
            warehouse value unescaped (``/``, ``=``, spaces, upper case).
    """
    if not _SITE_RE.match(site):
        raise ValueError(
            f"invalid site name {site!r}: use lowercase letters, digits, '.', '-' or '_' "
            "(for example 'epa.gov')"
        )
    return site


def hour_label(hour: dt.datetime) -> str:
    """Format a UTC hour as ``YYYY-MM-DDTHH`` (the partition folder name).

    Raises:
        ValueError: if ``hour`` is naive, not UTC, or not on the hour.
    """
    if hour.tzinfo is None or hour.utcoffset() != dt.timedelta(0):
        raise ValueError(f"hour must be timezone-aware UTC, got {hour!r}")
    if hour.minute or hour.second or hour.microsecond:
        raise ValueError(f"hour must be on the hour, got {hour.isoformat()}")
    return hour.strftime("%Y-%m-%dT%H")


def parse_hour_label(label: str) -> dt.datetime:
    """Inverse of :func:`hour_label`: ``'1995-08-01T04'`` -> 1995-08-01 04:00 UTC.

    Raises:
        ValueError: if ``label`` is not of the form ``YYYY-MM-DDTHH``.
    """
    if not _HOUR_LABEL_RE.match(label):
        raise ValueError(f"not an hour label (YYYY-MM-DDTHH): {label!r}")
    return dt.datetime.strptime(label, "%Y-%m-%dT%H").replace(tzinfo=dt.UTC)


def landing_hour_prefix(site: str, hour: dt.datetime) -> str:
    """Folder of one site's landed files for one UTC hour."""
    return f"{LANDING_PREFIX}/site={validate_site(site)}/hour={hour_label(hour)}"


def landed_data_key(site: str, hour: dt.datetime, sha256: str) -> str:
    """Key of a landed gzip file; named by its content checksum, so re-landing is idempotent."""
    return f"{landing_hour_prefix(site, hour)}/{sha256[:32]}{LANDED_DATA_SUFFIX}"


def landed_manifest_key(data_key: str) -> str:
    """Key of the manifest that belongs to the landed file ``data_key``."""
    if not data_key.endswith(LANDED_DATA_SUFFIX):
        raise ValueError(f"not a landed data key: {data_key!r}")
    return data_key[: -len(LANDED_DATA_SUFFIX)] + LANDED_MANIFEST_SUFFIX


_LANDED_MANIFEST_RE = re.compile(
    r"^"
    + re.escape(LANDING_PREFIX)
    + r"/site=(?P<site>[^/]+)/hour=(?P<hour>[^/]+)/[^/]+"
    + re.escape(LANDED_MANIFEST_SUFFIX)
    + r"$"
)


def parse_landed_manifest_key(key: str) -> tuple[str, dt.datetime] | None:
    """Return ``(site, hour)`` for a landed-manifest key, or None for any other key."""
    match = _LANDED_MANIFEST_RE.match(key)
    if not match:
        return None
    try:
        return match["site"], parse_hour_label(match["hour"])
    except ValueError:
        return None


def attempt_prefix(attempt_id: str) -> str:
    """Prefix under which one build attempt writes all its Parquet files."""
    if not re.match(r"^[A-Za-z0-9_\-]+$", attempt_id):
        raise ValueError(f"attempt id must be [A-Za-z0-9_-]+, got {attempt_id!r}")
    return f"{STAGING_PREFIX}/attempt={attempt_id}"


def deadletter_attempt_prefix(attempt_id: str) -> str:
    """Prefix under which one build attempt writes its dead-letter Parquet files."""
    attempt_prefix(attempt_id)  # validates
    return f"{DEADLETTER_PREFIX}/attempt={attempt_id}"


def hour_manifest_key(hour: dt.datetime) -> str:
    """Key of the manifest that names the Parquet files that count for one UTC hour."""
    return f"{STAGING_PREFIX}/hour={hour_label(hour)}/{HOUR_MANIFEST_NAME}"

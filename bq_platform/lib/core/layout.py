"""Every object-store key, in one place so all stages agree: relative, ``/``-separated::

landing/pageviews/site=<site>/hour=<YYYY-MM-DDTHH>/<sha256[:32]>.log.gz            landed file
landing/pageviews/site=<site>/hour=<YYYY-MM-DDTHH>/<sha256[:32]>.manifest.json     written last
landing/_registry/site=<site>/<sha256 of the source name>.json     what was landed of a source
staging/pageviews/attempt=<attempt_id>/full/hour=<YYYY-MM-DDTHH>/part-*.parquet   one attempt
staging/pageviews/attempt=<attempt_id>/sample/hour=<YYYY-MM-DDTHH>/part-*.parquet
deadletter/pageviews/attempt=<attempt_id>/hour=<YYYY-MM-DDTHH>/part-*.parquet     rejected lines
staging/pageviews/hour=<YYYY-MM-DDTHH>/_MANIFEST.json     names the files that count
staging/pageviews/_ATTEMPTS_UNNAMED.json     the full cleanup pass: sightings, settled attempts
staging/rollups/<table>/day=<YYYY-MM-DD>/<fingerprint[:20]>/part-*.parquet   a day's rollup
staging/rollups/<table>/day=<YYYY-MM-DD>/<fingerprint[:20]>/_ROLLUP.json     written last
staging/rollups/_UNFINISHED.json     the rollup cleanup: first sightings of unfinished folders
"""

import datetime as dt
import hashlib
import re
import urllib.parse

from bq_platform.lib.core.hours import hour_label, parse_hour_label

LANDING_PREFIX = "landing/pageviews"
REGISTRY_PREFIX = "landing/_registry"
STAGING_PREFIX = "staging/pageviews"
DEADLETTER_PREFIX = "deadletter/pageviews"
ROLLUPS_PREFIX = "staging/rollups"
ROLLUP_MANIFEST_NAME = "_ROLLUP.json"

LANDED_DATA_SUFFIX = ".log.gz"
LANDED_MANIFEST_SUFFIX = ".manifest.json"
HOUR_MANIFEST_NAME = "_MANIFEST.json"

_SITE_RE = re.compile(r"^[a-z0-9][a-z0-9.\-_]{0,99}$")


def validate_site(site: str) -> str:
    """Return ``site`` unchanged if it is a valid site name (lowercase host-like, <= 100 chars).

    Raises:
        ValueError: for ``/``, ``=``, spaces, upper case or other unsafe characters.
    """
    if not _SITE_RE.fullmatch(site):
        raise ValueError(
            f"invalid site name {site!r}: use lowercase letters, digits, '.', '-' or '_' "
            "(for example 'epa.gov')"
        )
    return site


def landing_hour_prefix(site: str, hour: dt.datetime) -> str:
    """Folder of one site's landed files for one UTC hour."""
    return f"{LANDING_PREFIX}/site={validate_site(site)}/hour={hour_label(hour)}"


def landed_data_key(site: str, hour: dt.datetime, sha256: str) -> str:
    """Key of a landed gzip file, named by the checksum of the content first landed there.

    The lander may rewrite a growing log's last object in place, so only the manifest's
    ``sha256`` is authoritative.
    """
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
    match = _LANDED_MANIFEST_RE.fullmatch(key)
    if not match:
        return None
    try:
        return match["site"], parse_hour_label(match["hour"])
    except ValueError:
        return None


_LANDED_KEY_RE = re.compile(
    r"^"
    + re.escape(LANDING_PREFIX)
    + r"/site=(?P<site>[^/]+)/hour=(?P<hour>[^/]+)/(?P<name>[^/]+)$"
)


def parse_landed_key(key: str) -> tuple[str, dt.datetime, str] | None:
    """``(site, hour, file name)`` of any object directly in a landing hour folder, else None."""
    match = _LANDED_KEY_RE.fullmatch(key)
    if not match:
        return None
    try:
        return match["site"], parse_hour_label(match["hour"]), match["name"]
    except ValueError:
        return None


def is_landed_manifest_name(name: str) -> bool:
    """True for the file name of a landed manifest (``*.manifest.json``)."""
    return name.endswith(LANDED_MANIFEST_SUFFIX)


def landing_registry_key(site: str, source: str) -> str:
    """Key of the landing registry entry of one source file of a site, named by the SHA-256
    (hex) of the source name's bytes: 69 characters whatever the name, where Linux file systems
    allow 255 bytes per path component and GCS 1,024 bytes per object name. The entry itself
    holds the full name.

    The name's bytes are its UTF-8, undecodable bytes of a POSIX file name (``os.fsdecode``'s
    surrogate escapes) as they are on disk, so every name a file system accepts has a key.

    Raises:
        ValueError: if the site is invalid or the source name is empty, ``.`` or ``..``.
    """
    if source in ("", ".", ".."):
        raise ValueError(f"invalid source name {source!r}")
    digest = hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()
    return f"{REGISTRY_PREFIX}/site={validate_site(site)}/{digest}.json"


#: GCS's limit on an object name, in UTF-8 bytes (cloud.google.com/storage/docs/objects).
_MAX_OBJECT_NAME_BYTES = 1024


def quoted_registry_key(site: str, source: str) -> str | None:
    """The URL-quoted form of a registry entry's key (``<source, URL-quoted>.json``), which
    data folders may hold; read when :func:`landing_registry_key` is absent, never written.

    None when no store can hold it: a name that is not UTF-8, or a key past GCS's 1,024 bytes.

    Raises:
        ValueError: as :func:`landing_registry_key`.
    """
    landing_registry_key(site, source)  # validates
    try:
        quoted = urllib.parse.quote(source, safe="")
    except UnicodeEncodeError:
        return None
    key = f"{REGISTRY_PREFIX}/site={site}/{quoted}.json"
    return key if len(key.encode("utf-8")) <= _MAX_OBJECT_NAME_BYTES else None


def attempt_prefix(attempt_id: str) -> str:
    """Prefix under which one build attempt writes all its Parquet files."""
    if not re.fullmatch(r"^[A-Za-z0-9_\-]+$", attempt_id):
        raise ValueError(f"attempt id must be [A-Za-z0-9_-]+, got {attempt_id!r}")
    return f"{STAGING_PREFIX}/attempt={attempt_id}"


def deadletter_attempt_prefix(attempt_id: str) -> str:
    """Prefix under which one build attempt writes its dead-letter Parquet files."""
    attempt_prefix(attempt_id)  # validates
    return f"{DEADLETTER_PREFIX}/attempt={attempt_id}"


def hour_manifest_key(hour: dt.datetime) -> str:
    """Key of the manifest that names the Parquet files that count for one UTC hour."""
    return f"{STAGING_PREFIX}/hour={hour_label(hour)}/{HOUR_MANIFEST_NAME}"


def rollup_prefix(table: str, day: dt.date, fingerprint: str) -> str:
    """Folder of one day's rollup ``table`` for one content (``fingerprint``, hex; its first
    20 digits name the folder): the same content always lands in the same folder.

    Raises:
        ValueError: if ``table`` is not ``[a-z0-9_]+`` or ``fingerprint`` is not 20+ hex digits.
    """
    if not re.fullmatch(r"[a-z0-9_]+", table):
        raise ValueError(f"rollup table must be [a-z0-9_]+, got {table!r}")
    if not re.fullmatch(r"[0-9a-f]{20,}", fingerprint):
        raise ValueError("rollup fingerprint must be at least 20 lowercase hex digits")
    return f"{ROLLUPS_PREFIX}/{table}/day={day.isoformat()}/{fingerprint[:20]}"


def rollup_manifest_key(table: str, day: dt.date, fingerprint: str) -> str:
    """Key of the manifest that names the Parquet files of one day's rollup ``table``, written
    after them."""
    return f"{rollup_prefix(table, day, fingerprint)}/{ROLLUP_MANIFEST_NAME}"


#: Folder-name prefixes of one attempt and of one hour inside the staging and dead-letter trees.
ATTEMPT_FOLDER = "attempt="
HOUR_FOLDER = "hour="
#: Bookkeeping of :mod:`bq_platform.lib.hourly_build.retention`: first time each unnamed attempt
#: was seen.
ATTEMPT_REGISTRY_KEY = f"{STAGING_PREFIX}/_ATTEMPTS_UNNAMED.json"
#: Bookkeeping of :mod:`bq_platform.lib.daily_build.retention`: first time each unfinished
#: rollup folder was seen.
ROLLUP_REGISTRY_KEY = f"{ROLLUPS_PREFIX}/_UNFINISHED.json"


def attempt_hour_prefixes(attempt_id: str, hour: dt.datetime) -> tuple[str, str, str]:
    """The three folders one attempt wrote for one UTC hour: full, sample and dead letters."""
    label = hour_label(hour)
    return (
        f"{attempt_prefix(attempt_id)}/full/{HOUR_FOLDER}{label}",
        f"{attempt_prefix(attempt_id)}/sample/{HOUR_FOLDER}{label}",
        f"{deadletter_attempt_prefix(attempt_id)}/{HOUR_FOLDER}{label}",
    )


def parse_attempt_folder(name: str) -> str | None:
    """``'attempt=<id>'`` -> ``'<id>'``; None for any other folder name or an invalid id."""
    if not name.startswith(ATTEMPT_FOLDER):
        return None
    attempt_id = name[len(ATTEMPT_FOLDER) :]
    try:
        attempt_prefix(attempt_id)
    except ValueError:
        return None
    return attempt_id


def parse_hour_folder(name: str) -> dt.datetime | None:
    """``'hour=YYYY-MM-DDTHH'`` -> that UTC hour; None for any other folder name."""
    if not name.startswith(HOUR_FOLDER):
        return None
    try:
        return parse_hour_label(name[len(HOUR_FOLDER) :])
    except ValueError:
        return None

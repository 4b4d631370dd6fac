"""What the hourly build reads: the landed deliveries of a site and hour, checked.

A *delivery* is one landed manifest and the data file it names. Before Spark reads anything,
the build lists them (:func:`landed_hours`; a repeated SHA-256 of the same site and hour is a
``duplicate``, as delivery is at-least-once) and checks every file against its manifest
(:func:`verify_landed`).
"""

import dataclasses
import datetime as dt
import hashlib
import re
from collections.abc import Sequence

from bq_platform.lib.core import commands, layout
from bq_platform.lib.core.manifest import LandedManifest, LandingError, ManifestError
from bq_platform.lib.landing.index import SITE_FOLDER, find_orphans
from bq_platform.lib.storage.base import (
    ListedObject,
    ObjectNotFoundError,
    ObjectStore,
    crc32c,
    side_by_side,
)

GZIP_MAGIC = b"\x1f\x8b"
#: Allowed landed file names (what the lander writes; Hadoop paths break on ':' and the like).
_SAFE_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_MAX_LISTED_PROBLEMS = 20
#: What to do about a landed file that disagrees with its manifest or cannot be read.
LANDING_HINT = (
    "re-land the file with `bq-platform land` (or have its producer deliver it again), "
    "then run these hours again"
)


@dataclasses.dataclass(frozen=True)
class LandedDelivery:
    """One landed manifest as the build sees it.

    Attributes:
        duplicate: True when an earlier manifest (by key order) of the same site and hour has
            the same SHA-256: this delivery's lines count as ``duplicates`` and are not read.
        data_object: the data file as the build's listing saw it; None if it was not listed.
    """

    manifest_key: str
    manifest: LandedManifest
    duplicate: bool = False
    data_object: ListedObject | None = None


def landed_hours(
    store: ObjectStore, sites: Sequence[str], hours: Sequence[dt.datetime]
) -> dict[tuple[str, dt.datetime], tuple[list[LandedDelivery], list[str]]]:
    """Per (site, UTC hour) of ``sites`` x ``hours``: its landed manifests (by key, duplicates
    marked) and its orphans (:func:`bq_platform.lib.landing.index.find_orphans`).

    One listing per site, then the manifests read side by side.

    Raises:
        LandingError: for the first manifest that is unreadable, names another site or hour,
            or points at a data file outside its folder or not named ``[A-Za-z0-9._-]+.gz``.
    """
    wanted = sorted(set(hours))
    keys: dict[tuple[str, dt.datetime], list[str]] = {(s, h): [] for s in sites for h in wanted}
    if not wanted:
        return {}
    after_last = wanted[-1] + dt.timedelta(hours=1)
    listed: dict[str, ListedObject] = {}
    for site in sites:
        site_objects = store.list_objects(
            f"{layout.LANDING_PREFIX}/{SITE_FOLDER}{layout.validate_site(site)}",
            start=layout.landing_hour_prefix(site, wanted[0]) + "/",
            end=layout.landing_hour_prefix(site, after_last) + "/",
        )
        for key, obj in site_objects.items():
            parsed = layout.parse_landed_key(key)
            if parsed is not None and (site, parsed[1]) in keys:
                keys[(site, parsed[1])].append(key)
                listed[key] = obj
    manifest_keys = [
        k for ks in keys.values() for k in ks if layout.parse_landed_manifest_key(k) is not None
    ]
    texts = store.read_many(manifest_keys)
    return {
        (site, hour): _hour_deliveries(store, site, hour, sorted(ks), texts, listed)
        for (site, hour), ks in sorted(keys.items())
    }


def landed_hour(
    store: ObjectStore, site: str, hour: dt.datetime
) -> tuple[list[LandedDelivery], list[str]]:
    """:func:`landed_hours` of one site and hour (raises as it does)."""
    return landed_hours(store, [site], [hour])[(site, hour)]


def _hour_deliveries(
    store: ObjectStore,
    site: str,
    hour: dt.datetime,
    keys: Sequence[str],
    texts: dict[str, bytes | ObjectNotFoundError],
    listed: dict[str, ListedObject],
) -> tuple[list[LandedDelivery], list[str]]:
    """The deliveries and orphans of one site and hour (see :func:`landed_hours`)."""
    prefix = layout.landing_hour_prefix(site, hour)
    deliveries: list[LandedDelivery] = []
    seen: set[str] = set()
    for key in keys:
        if key not in texts:  # not a manifest
            continue
        uri = store.uri(key)
        try:
            text = texts[key]
            if isinstance(text, ObjectNotFoundError):
                raise text
            manifest = LandedManifest.from_json(text, where=uri)
        except (ManifestError, ObjectNotFoundError) as exc:
            raise LandingError(f"{exc}; {LANDING_HINT}") from exc
        folder, _, name = manifest.data_key.rpartition("/")
        problem = None
        if manifest.site != site or manifest.hour != hour:
            problem = (
                f"says site {manifest.site!r} hour {layout.hour_label(manifest.hour)} but is in "
                f"the folder of site {site!r} hour {layout.hour_label(hour)}"
            )
        elif folder != prefix:
            problem = f"points at {manifest.data_key!r}, outside its own folder {prefix!r}"
        elif not _SAFE_NAME_RE.fullmatch(name) or not name.endswith(".gz"):
            problem = (
                f"names data file {name!r}: landed files must be gzip named [A-Za-z0-9._-]+.gz"
            )
        if problem:
            raise LandingError(f"landed manifest {uri} {problem}; {LANDING_HINT}")
        deliveries.append(
            LandedDelivery(
                key,
                manifest,
                duplicate=manifest.sha256 in seen,
                data_object=listed.get(manifest.data_key),
            )
        )
        seen.add(manifest.sha256)
    return deliveries, find_orphans(list(keys), [d.manifest for d in deliveries])


def _check_file(store: ObjectStore, delivery: LandedDelivery) -> str | None:
    """What is wrong with ``delivery``'s data file, or None (see :func:`verify_landed`)."""
    manifest = delivery.manifest
    problem = _file_problem(store, delivery)
    if problem is None:
        return None
    data_uri, manifest_uri = store.uri(manifest.data_key), store.uri(delivery.manifest_key)
    return (
        f"landed file {data_uri} (manifest {manifest_uri}): {problem}; land it again: "
        f"{commands.land(manifest.site, manifest.source)}"
    )


def _file_problem(store: ObjectStore, delivery: LandedDelivery) -> str | None:
    """:func:`_check_file`'s finding, without the file's name."""
    manifest = delivery.manifest
    listed = delivery.data_object
    if listed is not None and listed.crc32c and manifest.crc32c:  # no request: the listing
        if listed.size != manifest.bytes:
            return f"size is {listed.size} bytes, the manifest says {manifest.bytes}"
        if listed.crc32c != manifest.crc32c:
            return f"CRC32C is {listed.crc32c}, the manifest says {manifest.crc32c}"
        return None
    try:
        data = store.read_bytes(manifest.data_key)
    except ObjectNotFoundError:
        return "the file is missing"
    if len(data) != manifest.bytes:
        return f"size is {len(data)} bytes, the manifest says {manifest.bytes}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest.sha256:
        return f"SHA-256 is {digest}, the manifest says {manifest.sha256}"
    if manifest.crc32c and (computed := crc32c(data)) != manifest.crc32c:
        return f"CRC32C is {computed}, the manifest says {manifest.crc32c}"
    if manifest.bytes and not data.startswith(GZIP_MAGIC):
        return "not a gzip file"
    return None


def verify_landed(store: ObjectStore, deliveries: Sequence[LandedDelivery]) -> None:
    """Check that every landed file exists with its manifest's byte size and checksum.

    When both the listing and the manifest have the file's CRC32C (GCS lists it for every
    object: cloud.google.com/storage/docs/data-validation), size and CRC32C are compared with no
    request; otherwise one download per file checks size, SHA-256, CRC32C and the gzip magic.

    Raises:
        LandingError: listing every file that is missing or disagrees, and what to do.
    """
    results = side_by_side(lambda d: _check_file(store, d), deliveries, store.read_threads)
    problems = sorted(p for p in results if p)
    if problems:
        shown = problems[:_MAX_LISTED_PROBLEMS]
        more = len(problems) - len(shown)
        raise LandingError(
            f"{len(problems)} landed file(s) disagree with their manifests:\n  "
            + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more else "")
            + f"\nFix: {LANDING_HINT}."
        )


#: Spark's error for a file its scan could not read (Spark 4 error class ``FAILED_READ_FILE``:
#: "Encountered error while reading file <path>."), and the root cause Java names after it.
_FAILED_READ_RE = re.compile(
    r"\[FAILED_READ_FILE[.\w]*\] Encountered error while reading file (\S+)\.\s"
)
_CAUSED_BY_RE = re.compile(r"^Caused by: (.+)$", re.MULTILINE)


def unreadable_landed_file(
    exc: BaseException, store: ObjectStore, deliveries: Sequence[LandedDelivery]
) -> LandingError | None:
    """The :class:`LandingError` for a Spark failure that is a landed file Spark could not read
    (not gzip, truncated, deleted since it was checked), naming the file, its manifest, the
    cause and what to do; None for any other failure.
    """
    found = _FAILED_READ_RE.search(str(exc))
    if found is None:
        return None
    uri = found.group(1)
    try:
        key = store.key_for_uri(uri)
    except ValueError:
        return None
    delivery = next((d for d in deliveries if d.manifest.data_key == key), None)
    if delivery is None:
        return None
    causes = _CAUSED_BY_RE.findall(str(exc))
    cause = causes[-1].strip() if causes else "unreadable"
    manifest = delivery.manifest
    return LandingError(
        f"landed file {store.uri(key)} (manifest {store.uri(delivery.manifest_key)}) could not "
        f"be read as gzip text: {cause}; no hour was built. Fix: land it again, "
        f"{commands.land(manifest.site, manifest.source)} (or have its producer deliver it "
        "again), then run these hours again."
    )

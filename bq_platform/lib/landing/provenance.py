"""Which source file a landed data file came from, so a message can name the file to land again.

A landed manifest names its source (``LandedManifest.source``). A data file without its
manifest (an orphan: an incomplete delivery, or a manifest lost since) is looked up in the
landing registry of its site (:mod:`bq_platform.lib.landing.producer.registry`), where
``bq-platform land`` records the objects each source delivered. Another producer writes no
registry; its orphans have no known source.
"""

from collections.abc import Iterable

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import LandedManifest
from bq_platform.lib.landing.producer.registry import SourceState
from bq_platform.lib.storage.base import ObjectStore


def landed_sources(store: ObjectStore, data_keys: Iterable[str]) -> dict[str, str]:
    """``{data key: source name}`` for the landed data files ``data_keys`` whose source is
    known: from the file's landed manifest, else from its site's registry entries. Keys of an
    unknown source are left out. Unreadable manifests and registry entries are skipped, never
    raised: the answer only completes a message. Reads one manifest per key, and a site's
    whole registry only when some key of that site has no manifest."""
    found: dict[str, str] = {}
    unexplained: dict[str, set[str]] = {}
    for key in dict.fromkeys(data_keys):
        parsed = layout.parse_landed_key(key)
        if parsed is None:
            continue
        source = _manifest_source(store, key)
        if source:
            found[key] = source
        else:
            unexplained.setdefault(parsed[0], set()).add(key)
    for site, keys in sorted(unexplained.items()):
        for state in _registry_states(store, site):
            for delivery in state.deliveries:
                for key in keys.intersection(delivery.objects.values()):
                    found.setdefault(key, state.source)
    return found


def _manifest_source(store: ObjectStore, data_key: str) -> str:
    """The source its landed manifest names; ``""`` if the manifest is missing or unreadable."""
    try:
        manifest_key = layout.landed_manifest_key(data_key)
        return LandedManifest.from_json(store.read_bytes(manifest_key)).source
    except (OSError, ValueError):  # missing (ObjectNotFoundError), unreadable, not a data key
        return ""


def _registry_states(store: ObjectStore, site: str) -> list[SourceState]:
    """The readable registry entries of ``site``, in key order."""
    states = []
    try:
        keys = store.list_keys(f"{layout.REGISTRY_PREFIX}/site={site}")
    except OSError:
        return states
    for key in keys:
        try:
            states.append(SourceState.from_json(store.read_bytes(key), where=key))
        except (OSError, ValueError):
            continue
    return states

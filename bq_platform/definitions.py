"""Entry point of the code location (``workspace.yaml``, ``dagster dev``, ``bq-platform run``).

Everything under ``bq_platform/defs/`` is discovered by ``dg.load_from_defs_folder``; the
resources of the environment (``BQ_PLATFORM_ENV``) are bound in ``defs/resources.py``.
"""

import importlib
import threading
from pathlib import Path

import dagster as dg

#: Where Dagster 1.13 finds the installed packages' component types for the catalog it attaches
#: to every definitions loaded from a defs folder (``ComponentRootComponent.build_defs`` ->
#: ``get_library_json_enriched_defs``): it imports each ``dagster_dg_cli.registry_modules``
#: entry point (here ``dagster_gcp.components``, which imports the BigQuery client and pandas)
#: and renders each type's JSON schema and sample YAML.
_PLUGIN_DISCOVERY = (
    "dagster.components.core.package_entry",
    "discover_entry_point_package_objects",
)
_PLUGIN_DISCOVERY_LOCK = threading.Lock()


@dg.definitions
def defs() -> dg.Definitions:
    """All definitions of the project."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)


def defs_without_component_catalog() -> dg.Definitions:
    """:func:`defs` without the catalog of installed component types, for runs executed in this
    process (``bq-platform run``); the code location (``dagster dev``, the UI) keeps it.

    The catalog (repository metadata ``plugin_component_types_json``) is what ``dg`` and the UI
    show of the component types packages offer; a run never reads it. Building it took 0.64 s
    of the 1.0 s this loads in, on the CPU the JVM starting beside it needs: without it the
    hourly run's first event came ~0.9 s sooner and its first step ~0.35 s sooner (then waiting
    for the JVM; 3 runs each on the 1x bench input, issue 9, docs/PERFORMANCE.md). Assets,
    checks, jobs, schedules, sensors and resources are the same (test_definitions.py). If
    Dagster no longer has the discovery function named in :data:`_PLUGIN_DISCOVERY`, this is
    :func:`defs` with the catalog.
    """
    module = importlib.import_module(_PLUGIN_DISCOVERY[0])
    original = getattr(module, _PLUGIN_DISCOVERY[1], None)
    if original is None:
        return defs()
    with _PLUGIN_DISCOVERY_LOCK:
        setattr(module, _PLUGIN_DISCOVERY[1], lambda: {})
        try:
            return defs()
        finally:
            setattr(module, _PLUGIN_DISCOVERY[1], original)

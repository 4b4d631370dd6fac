"""The landing zone as an observable source: landed logs per UTC hour, with source counts."""

import dagster as dg

from bq_platform.defs.partitions import hourly_partitions
from bq_platform.defs.resources import ObjectStoreResource, PipelineSettings
from bq_platform.lib.planning import scan_window


@dg.observable_source_asset(
    key=["landing", "pageview_logs"],
    partitions_def=hourly_partitions,
    group_name="landing",
    # observable_source_asset has no owners/kinds arguments in dagster 1.13; kinds are tags.
    tags={"dagster/kind/gcs": "", "dagster/kind/json": ""},
    description=(
        "Access logs landed by producers under landing/pageviews/site=<site>/hour=<YYYY-MM-DDTHH>/,"
        " one manifest per file (line count, bytes, SHA-256, CRC32C) written last. The manifests' "
        "line counts are the source counts the pipeline's accounting is checked against. "
        "The data version of an hour is the fingerprint of its files' checksums, so an hour "
        "changes version exactly when new content lands. An observation covers the days "
        "of BQ_PLATFORM_LOOKBACK_DAYS when it is set."
    ),
)
def pageview_logs(
    context: dg.AssetExecutionContext,
    object_store: ObjectStoreResource,
    settings: PipelineSettings,
) -> dg.DataVersionsByPartition:
    index = scan_window(object_store.get_store(), settings.lookback_days)
    for hour in index.hours():
        context.log.debug(
            "%s: %d files, %d source lines", hour.partition_key, hour.files, hour.source_lines
        )
    context.log.info(
        "landing zone: %d hours, %d files, %d source lines",
        len(index.hours()),
        sum(h.files for h in index.hours()),
        sum(h.source_lines for h in index.hours()),
    )
    return dg.DataVersionsByPartition({h.partition_key: h.input_fingerprint for h in index.hours()})

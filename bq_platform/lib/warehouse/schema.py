"""Table specifications shared by every warehouse: names, columns, partitioning, clustering.

Types are BigQuery standard SQL type names (the DuckDB warehouse maps them). Schemas are
explicit, never autodetected.
"""

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Mapping

from bq_platform.lib.core.hours import hour_id

PAGEVIEWS_TABLE = "pageviews"
PAGEVIEWS_SAMPLE_TABLE = "pageviews_sample"
AUDIT_TABLE = "pageviews_audit"
DEADLETTERS_TABLE = "pageview_deadletters"
DAILY_BY_SITE_TABLE = "pageviews_daily_by_site"
DAILY_BY_PAGE_TABLE = "pageviews_daily_by_page"
#: The daily rollups of ``pageviews`` (:func:`rollup_spec`).
ROLLUP_TABLES = (DAILY_BY_SITE_TABLE, DAILY_BY_PAGE_TABLE)
STAGE_TABLE_PREFIX = {"full": "pageviews_stage_", "sample": "pageviews_sample_stage_"}
STAGE_EXPIRATION_DAYS = 7


#: Standard SQL type names we use, and the legacy names the API may return for them.
TYPE_ALIASES: Mapping[str, str] = {
    "INTEGER": "INT64",
    "FLOAT": "FLOAT64",
    "BOOLEAN": "BOOL",
    "RECORD": "STRUCT",
    "DECIMAL": "NUMERIC",
    "BIGDECIMAL": "BIGNUMERIC",
}


def normalize_type(type_name: str | None) -> str:
    """Upper-case standard SQL name of a column type (``INTEGER`` -> ``INT64``; None -> STRING)."""
    name = (type_name or "STRING").upper()
    return TYPE_ALIASES.get(name, name)


def normalize_mode(mode: str | None) -> str:
    """Upper-case column mode; None (as the API returns it) -> ``NULLABLE``."""
    return (mode or "NULLABLE").upper()


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: BigQuery type name (STRING, INT64, TIMESTAMP, DATE) and mode."""

    name: str
    type: str
    mode: str = "NULLABLE"
    description: str = ""


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """What a table must look like.

    Attributes:
        name: table name without dataset, e.g. ``pageviews``.
        partition_field: DATE column for daily partitioning, or None.
        clustering: clustering columns, most selective filter first (``site``).
        require_partition_filter: queries must filter on the partition column.
        expiration_days: the table deletes itself this many days after creation.
    """

    name: str
    columns: tuple[Column, ...]
    partition_field: str | None = None
    clustering: tuple[str, ...] = ()
    require_partition_filter: bool = False
    expiration_days: int | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    description: str = ""

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def fingerprint(self) -> str:
        """Hex SHA-256 of everything but the description: the "ensure table" cache key."""
        payload = {
            "name": self.name,
            "columns": [(c.name, c.type, c.mode) for c in self.columns],
            "partition_field": self.partition_field,
            "clustering": list(self.clustering),
            "require_partition_filter": self.require_partition_filter,
            "expiration_days": self.expiration_days,
            "labels": dict(sorted(self.labels.items())),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


#: The traffic classification of a pageview (:mod:`bq_platform.lib.traffic.classes`): the last
#: columns of ``pageviews``, as BigQuery adds columns only at the end of a table.
TRAFFIC_COLUMNS: tuple[Column, ...] = (
    Column(
        "traffic_class",
        "STRING",
        "REQUIRED",
        "human, bot (user agent on the crawler-user-agents list) or suspected_bot (a heuristic).",
    ),
    Column(
        "bot_reason",
        "STRING",
        "NULLABLE",
        "Why the row is not human: crawler-user-agents:<pattern> or "
        "heuristic:<name>[threshold]; null for human rows.",
    ),
    Column(
        "browser_family",
        "STRING",
        "NULLABLE",
        "ua-parser browser family; null only where the line has no user agent.",
    ),
    Column(
        "os_family",
        "STRING",
        "NULLABLE",
        "ua-parser OS family; null only where the line has no user agent.",
    ),
    Column(
        "device_family",
        "STRING",
        "NULLABLE",
        "ua-parser device family; null only where the line has no user agent.",
    ),
)

PAGEVIEW_COLUMNS: tuple[Column, ...] = (
    Column(
        "event_id",
        "STRING",
        "REQUIRED",
        "Stable ID, unique across sites and hours: SHA-256 of the site, the landed file's "
        "checksum and the line number.",
    ),
    Column("event_ts", "TIMESTAMP", "REQUIRED", "Request time, UTC."),
    Column("event_date", "DATE", "REQUIRED", "UTC date of event_ts; the partition column."),
    Column("site", "STRING", "REQUIRED", "Publisher key, e.g. epa.gov."),
    Column("visitor_id", "STRING", "REQUIRED", "Keyed hash (HMAC-SHA256) of the client address."),
    Column("page_path", "STRING", "REQUIRED", "Requested path without the query string."),
    Column("query_string", "STRING", "NULLABLE", "Query string without '?', if any."),
    Column("http_method", "STRING", "REQUIRED", "Request method (GET)."),
    Column("http_protocol", "STRING", "NULLABLE", "HTTP/1.0 etc.; null for HTTP/0.9-style lines."),
    Column("status", "INT64", "REQUIRED", "HTTP status code."),
    Column("response_bytes", "INT64", "NULLABLE", "Response size; null when logged as '-'."),
    Column("referrer", "STRING", "NULLABLE", "Referer header (Combined Log Format only)."),
    Column("user_agent", "STRING", "NULLABLE", "User-Agent header (Combined Log Format only)."),
    Column("vhost", "STRING", "NULLABLE", "Virtual host 'host:port' (vhost_combined lines only)."),
    Column(
        "extra_fields",
        "STRING",
        "NULLABLE",
        "Fields after the user agent (%D, $request_time...), as written; null if none.",
    ),
    *TRAFFIC_COLUMNS,
)

AUDIT_COLUMNS_SPEC: tuple[Column, ...] = (
    Column("site", "STRING", "REQUIRED"),
    Column("hour", "TIMESTAMP", "REQUIRED", "UTC hour."),
    Column("event_date", "DATE", "REQUIRED"),
    Column("source_lines", "INT64", "REQUIRED", "Lines the producers' manifests announce."),
    Column("pageviews", "INT64", "REQUIRED"),
    Column("non_page_hits", "INT64", "REQUIRED"),
    Column("rejected", "INT64", "REQUIRED"),
    Column("duplicates", "INT64", "REQUIRED"),
    Column("out_of_window", "INT64", "REQUIRED"),
    Column("sample_rows", "INT64", "REQUIRED"),
    Column("visitors", "INT64", "REQUIRED"),
    Column("sample_visitors", "INT64", "REQUIRED"),
    Column("files", "INT64", "REQUIRED"),
    Column("fingerprint", "STRING", "REQUIRED", "Content fingerprint of the hour's build."),
    Column("run_id", "STRING", "REQUIRED", "Dagster run (or CLI attempt) that wrote the row."),
    # NULLABLE: BigQuery appends a column to an existing table only as NULLABLE (compare.py).
    Column("human_pageviews", "INT64", "NULLABLE", "Pageviews classified human."),
    Column("bot_pageviews", "INT64", "NULLABLE", "Pageviews classified bot or suspected_bot."),
)

DEADLETTER_COLUMNS_SPEC: tuple[Column, ...] = (
    Column("site", "STRING", "REQUIRED", "Publisher key, e.g. epa.gov."),
    Column(
        "delivery_hour",
        "TIMESTAMP",
        "REQUIRED",
        "UTC hour partition whose delivery held the line (pageviews_audit.hour).",
    ),
    Column("delivery_date", "DATE", "REQUIRED", "UTC date of delivery_hour; the partition column."),
    Column("data_key", "STRING", "REQUIRED", "Object key of the landed file the line is in."),
    Column("line_no", "INT64", "REQUIRED", "1-based line number in that file."),
    Column("reason", "STRING", "REQUIRED", "Reason code (bq-platform deadletters lists them)."),
    Column("raw", "STRING", "NULLABLE", "The line as UTF-8 (invalid bytes replaced by U+FFFD)."),
)

_LABELS = {"app": "bq_platform"}


def pageviews_spec(require_partition_filter: bool = True) -> TableSpec:
    """The production ``pageviews`` table: day-partitioned on event_date, clustered by site."""
    return TableSpec(
        name=PAGEVIEWS_TABLE,
        columns=PAGEVIEW_COLUMNS,
        partition_field="event_date",
        clustering=("site", "page_path"),
        require_partition_filter=require_partition_filter,
        labels=_LABELS,
        description="Pageviews (AWStats 'pages') per request, one day partition per UTC date.",
    )


def pageviews_sample_spec(require_partition_filter: bool = True) -> TableSpec:
    """``pageviews_sample``: 1 in 200 visitors, same schema and layout as ``pageviews``."""
    return dataclasses.replace(
        pageviews_spec(require_partition_filter),
        name=PAGEVIEWS_SAMPLE_TABLE,
        description="0.5% visitor sample of pageviews (1 in 200 visitors, by visitor_id hash).",
    )


def stage_table_name(kind: str, hour: dt.datetime) -> str:
    """``pageviews_stage_YYYYMMDDHH`` (kind ``full``) or ``pageviews_sample_stage_YYYYMMDDHH``."""
    return STAGE_TABLE_PREFIX[kind] + hour_id(hour)


def stage_spec(kind: str, hour: dt.datetime) -> TableSpec:
    """One hour's stage table: the published table's schema, partitioning and clustering.

    BigQuery copies into a column-partitioned table only from sources partitioned and
    clustered the same way (:func:`bq_platform.lib.warehouse.job_rules.check_copy_job`), so a
    stage table is the published table's spec with its own name, no partition filter, an
    expiration of :data:`STAGE_EXPIRATION_DAYS` days and a ``role: stage`` label.
    """
    published = pageviews_spec(False) if kind == "full" else pageviews_sample_spec(False)
    return dataclasses.replace(
        published,
        name=stage_table_name(kind, hour),
        require_partition_filter=False,
        expiration_days=STAGE_EXPIRATION_DAYS,
        labels={**_LABELS, "role": "stage"},
        description=f"Stage table ({kind}) of UTC hour {hour:%Y-%m-%dT%H}; replaced by each load.",
    )


def audit_spec() -> TableSpec:
    """``pageviews_audit``: one row per site and UTC hour with the accounting counts."""
    return TableSpec(
        name=AUDIT_TABLE,
        columns=AUDIT_COLUMNS_SPEC,
        partition_field="event_date",
        clustering=("site",),
        labels=_LABELS,
        description="Accounting per site and UTC hour: source_lines = pageviews + "
        "non_page_hits + rejected + duplicates + out_of_window.",
    )


def deadletters_spec() -> TableSpec:
    """``pageview_deadletters``: every rejected or out-of-window line of the current builds.

    One day partition per UTC delivery date (:mod:`bq_platform.lib.publish.deadletter_table`),
    clustered by site and reason, the filters an operator uses.
    """
    return TableSpec(
        name=DEADLETTERS_TABLE,
        columns=DEADLETTER_COLUMNS_SPEC,
        partition_field="delivery_date",
        clustering=("site", "reason"),
        labels=_LABELS,
        description="Rejected and out-of-window lines with their reason and raw text, one day "
        "partition per UTC delivery date; current build attempts only.",
    )


_ROLLUP_COLUMNS: Mapping[str, tuple[Column, ...]] = {
    DAILY_BY_SITE_TABLE: (
        Column("event_date", "DATE", "REQUIRED", "UTC date of the pageviews; partition column."),
        Column("site", "STRING", "REQUIRED", "Publisher key, e.g. epa.gov."),
        Column(
            "human_pageviews",
            "INT64",
            "REQUIRED",
            "Rows of pageviews of this site and day whose traffic_class is human.",
        ),
        Column(
            "bot_pageviews",
            "INT64",
            "REQUIRED",
            "Rows of pageviews of this site and day whose traffic_class is bot or suspected_bot.",
        ),
        Column(
            "human_visitors",
            "INT64",
            "REQUIRED",
            "Distinct visitor_id of the human rows of this site and day (exact count).",
        ),
    ),
    DAILY_BY_PAGE_TABLE: (
        Column("event_date", "DATE", "REQUIRED", "UTC date of the pageviews; partition column."),
        Column("site", "STRING", "REQUIRED", "Publisher key, e.g. epa.gov."),
        Column("page_path", "STRING", "REQUIRED", "Requested path without the query string."),
        Column(
            "human_pageviews",
            "INT64",
            "REQUIRED",
            "Rows of pageviews of this site, page and day whose traffic_class is human.",
        ),
        Column(
            "human_visitors",
            "INT64",
            "REQUIRED",
            "Distinct visitor_id of the human rows of this site, page and day (exact count).",
        ),
    ),
}
_ROLLUP_DOCS = {
    DAILY_BY_SITE_TABLE: "Pageviews per site and UTC day, human and bot apart, with distinct "
    "human visitors: one row per site with at least one pageview that day.",
    DAILY_BY_PAGE_TABLE: "Human pageviews per site, page and UTC day, with distinct human "
    "visitors: one row per (site, page_path) with at least one human pageview that day.",
}


def rollup_spec(table: str, require_partition_filter: bool = True) -> TableSpec:
    """A daily rollup of ``pageviews`` (``table`` one of :data:`ROLLUP_TABLES`): DAY partitions
    on ``event_date``, clustered by ``site`` (by page: ``site, page_path``), computed in Spark
    from the day's pageview files and loaded into ``table$YYYYMMDD``.

    Raises:
        ValueError: if ``table`` is not a rollup table.
    """
    if table not in _ROLLUP_COLUMNS:
        raise ValueError(f"not a rollup table: {table!r}; one of {ROLLUP_TABLES}")
    return TableSpec(
        name=table,
        columns=_ROLLUP_COLUMNS[table],
        partition_field="event_date",
        clustering=("site", "page_path") if table == DAILY_BY_PAGE_TABLE else ("site",),
        require_partition_filter=require_partition_filter,
        labels=_LABELS,
        description=_ROLLUP_DOCS[table],
    )

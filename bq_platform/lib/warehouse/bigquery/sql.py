"""The row half of the BigQuery backend: the publish ledger's rows and the audit table.

:class:`BigQuerySql` is mixed into :class:`~bq_platform.lib.warehouse.bigquery.warehouse.
BigQueryWarehouse`.

Writes are SQL. Every value is a query parameter; identifiers are validated before they are
put in backquotes. The ledger is append-only (``INSERT`` statements never conflict,
cloud.google.com/bigquery/docs/data-manipulation-language#concurrent_jobs); the audit rows of
some hours are replaced by one ``MERGE ... ON FALSE`` (atomic), and a concurrent-update
conflict on it ("Could not serialize access ...") is retried by the query job retry, bounded.

Reads are never queries (issue 9: checks bill 0 bytes; a query bills at least 10 MB per table
it reads, cloud.google.com/bigquery/pricing, on-demand compute pricing). They list the rows
with ``tabledata.list`` (``client.list_rows``), which processes no bytes and is not billed:
cloud.google.com/bigquery/pricing, "Free operations" (metadata operations, "calls to list,
get, patch, update and delete", are free). It pages by rows or about 10 MB a page
(cloud.google.com/bigquery/docs/paging-results) and accepts a partition decorator
(``table$YYYYMMDD`` lists one day partition, cloud.google.com/bigquery/docs/reference/rest/v2/
tabledata/list). Rows written by DML are in managed storage and listed at once (no streaming
buffer).

- The ledger is read whole, once per warehouse object (one per Dagster run), into a
  :class:`~bq_platform.lib.warehouse.ledger.LedgerIndex` (latest row per destination
  partition, as :func:`~bq_platform.lib.warehouse.ledger.latest` picks it); the rows this
  object appends are added to it. Consequence: a record another process writes during this
  run is seen by the next run, not this one. That is safe because two runs never publish the
  same partition at once (the warehouse pool and the run lock serialize them), and a job of
  another run that this run finds or adopts is judged by ``jobs.get`` and table metadata, the
  record only settles which content a partition holds. The ledger grows by one row per job
  (about 50 a day); ``tabledata.list`` pages it (:data:`LIST_PAGE_SIZE` rows a request).
- The audit rows of ``[start, end)`` are the rows of the day partitions
  ``pageviews_audit$YYYYMMDD`` of those UTC days, filtered by hour in Python.
"""

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import bigquery

from bq_platform.lib.warehouse import ledger, rules, schema
from bq_platform.lib.warehouse.bigquery.cache import TableCache
from bq_platform.lib.warehouse.bigquery.jobs import schema_fields
from bq_platform.lib.warehouse.schema import AUDIT_TABLE, Column, audit_spec

#: Rows per ``tabledata.list`` page (BigQuery also cuts a page at about 10 MB;
#: cloud.google.com/bigquery/docs/paging-results).
LIST_PAGE_SIZE = 10_000


class BigQuerySql:
    """Ledger and audit SQL of :class:`~bq_platform.lib.warehouse.bigquery.warehouse.BigQueryWarehouse`."""

    client: bigquery.Client
    project: str
    dataset: str
    location: str
    retry: Any
    job_retry: Any
    request_timeout_s: float
    rows_listed: Any
    _cache: TableCache
    _ledger_index: ledger.LedgerIndex | None

    def _sql_table(self, table: str) -> str:
        """Backquoted table reference for SQL; ``table`` is validated, never user data."""
        rules.check_table_name(table)
        return f"`{self.project}.{self.dataset}.{table}`"

    def _query(self, sql: str, params: Sequence[Any], *, dml: bool = False) -> list[Any]:
        config = bigquery.QueryJobConfig(
            query_parameters=list(params), use_legacy_sql=False, labels={"app": "bq_platform"}
        )
        job = self.client.query(
            sql,
            job_config=config,
            project=self.project,
            location=self.location,
            retry=self.retry,
            timeout=self.request_timeout_s,
            job_retry=self.job_retry,
        )
        result = job.result(retry=self.retry, timeout=self.request_timeout_s * 10)
        return [] if dml else list(result)

    def _list_rows(self, destination: str, columns: Sequence[Column]) -> list[dict[str, Any]]:
        """The rows of a table or ``table$YYYYMMDD`` (``tabledata.list``, free), as dicts of
        ``columns`` (asked by name, so a table with more columns reads the same); ``[]`` if
        the table is gone."""
        name, _ = rules.split_destination(destination)
        self.rows_listed[name] += 1
        try:
            rows = self.client.list_rows(
                self.table_id(destination),  # type: ignore[attr-defined]
                selected_fields=schema_fields(columns),  # given: no tables.get for the schema
                page_size=LIST_PAGE_SIZE,
                retry=self.retry,
                timeout=self.request_timeout_s,
            )
            return [dict(row.items()) for row in rows]
        except api_exceptions.NotFound:
            return []

    # -- publish ledger ----------------------------------------------------------------------

    def _ledger(self) -> ledger.LedgerIndex:
        """The ledger's latest rows, read once per warehouse object (see the module docstring)."""
        if self._ledger_index is None:
            name = ledger.PUBLISH_LEDGER_TABLE
            exists = name in self._existing()  # type: ignore[attr-defined]
            rows = self._list_rows(name, ledger.LEDGER_COLUMNS) if exists else []
            self._ledger_index = ledger.LedgerIndex(rows)
        return self._ledger_index

    def _ledger_rows(self, destination: str, partition: str) -> list[dict[str, Any]]:
        return self._ledger().rows(destination, partition)

    def _append_ledger_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """One DML ``INSERT ... SELECT FROM UNNEST(@rows)``: the rows as one ``ARRAY<STRUCT>``
        parameter, so a step's records are one query job whatever their number."""
        names = [c.name for c in ledger.LEDGER_COLUMNS]
        sql = (
            f"INSERT INTO {self._sql_table(ledger.PUBLISH_LEDGER_TABLE)} ({', '.join(names)}) "
            f"SELECT {', '.join(f'r.{n}' for n in names)} FROM UNNEST(@rows) AS r"
        )
        structs = [
            bigquery.StructQueryParameter(
                None,
                *[
                    bigquery.ScalarQueryParameter(
                        c.name, schema.normalize_type(c.type), row[c.name]
                    )
                    for c in ledger.LEDGER_COLUMNS
                ],
            )
            for row in rows
        ]
        self._query(sql, [bigquery.ArrayQueryParameter("rows", "STRUCT", structs)], dml=True)
        self._cache.appended(ledger.PUBLISH_LEDGER_TABLE, len(rows))
        if self._ledger_index is not None:
            for row in rows:
                self._ledger_index.add(row)

    # -- audit -------------------------------------------------------------------------------

    def replace_audit_rows(
        self, hours: Sequence[dt.datetime], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Atomically replace the ``pageviews_audit`` rows of ``hours`` with ``rows``.

        One ``MERGE ... ON FALSE`` statement deletes the old rows of those hours and inserts
        the new ones (BigQuery's documented atomic-replace pattern), the rows passed as one
        ``ARRAY<STRUCT>`` parameter. A concurrent-update conflict is retried (bounded).

        Raises:
            ValueError: if an hour is naive/not UTC, or a row misses a column or belongs to an
                hour that is not in ``hours``.
        """
        spec = audit_spec()
        self.ensure_table(spec)
        hour_set = set()
        for hour in hours:
            if hour.tzinfo is None or hour.utcoffset() != dt.timedelta(0):
                raise ValueError(f"audit hours must be timezone-aware UTC, got {hour!r}")
            hour_set.add(hour.astimezone(dt.UTC))
        if not hour_set:
            return
        struct_values = []
        for row in rows:
            missing = [c.name for c in spec.columns if c.name not in row]
            if missing:
                raise ValueError(f"audit row {dict(row)!r} misses columns {missing}")
            if row["hour"].astimezone(dt.UTC) not in hour_set:
                raise ValueError(f"audit row for {row['hour']} is not in the replaced hours")
            struct_values.append(
                bigquery.StructQueryParameter(
                    None,
                    *[
                        bigquery.ScalarQueryParameter(
                            c.name, schema.normalize_type(c.type), row[c.name]
                        )
                        for c in spec.columns
                    ],
                )
            )
        ordered_hours = sorted(hour_set)
        params: list[Any] = [
            bigquery.ArrayQueryParameter("hours", "TIMESTAMP", ordered_hours),
            bigquery.ArrayQueryParameter(
                "event_dates", "DATE", sorted({h.date() for h in ordered_hours})
            ),
        ]
        table = self._sql_table(AUDIT_TABLE)
        names = [c.name for c in spec.columns]
        if struct_values:
            params.append(bigquery.ArrayQueryParameter("rows", "STRUCT", struct_values))
            sql = (
                f"MERGE {table} AS t USING (SELECT "
                + ", ".join(f"r.{n} AS {n}" for n in names)
                + " FROM UNNEST(@rows) AS r) AS s ON FALSE "
                "WHEN NOT MATCHED BY SOURCE AND t.event_date IN UNNEST(@event_dates) "
                "AND t.hour IN UNNEST(@hours) THEN DELETE "
                "WHEN NOT MATCHED THEN INSERT (" + ", ".join(names) + ") "
                "VALUES (" + ", ".join(f"s.{n}" for n in names) + ")"
            )
        else:
            sql = (
                f"DELETE FROM {table} "
                "WHERE event_date IN UNNEST(@event_dates) AND hour IN UNNEST(@hours)"
            )
        self._query(sql, params, dml=True)
        self._cache.changed(AUDIT_TABLE)

    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        """``pageviews_audit`` rows with ``start <= hour < end``, ordered by hour and site.

        One ``tabledata.list`` per UTC day of the range (``pageviews_audit$YYYYMMDD``; the
        table is partitioned by ``event_date``, the hour's day), hours filtered here: no query,
        0 bytes billed.
        """
        spec = audit_spec()
        start_utc, end_utc = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
        if end_utc <= start_utc or AUDIT_TABLE not in self._existing():  # type: ignore[attr-defined]
            return []
        rows: list[dict[str, Any]] = []
        day, last = start_utc.date(), (end_utc - dt.timedelta(microseconds=1)).date()
        while day <= last:
            rows += self._list_rows(f"{AUDIT_TABLE}${day:%Y%m%d}", spec.columns)
            day += dt.timedelta(days=1)
        rows = [r for r in rows if start_utc <= r["hour"] < end_utc]
        return sorted(rows, key=lambda r: (r["hour"], r["site"]))

"""The SQL half of the BigQuery backend: the publish ledger's rows and the audit table.

:class:`BigQuerySql` is mixed into :class:`~bq_platform.lib.warehouse.bigquery.
BigQueryWarehouse`. Every value is a query parameter; identifiers are validated before they
are put in backquotes. The ledger is append-only (``INSERT`` statements never conflict,
cloud.google.com/bigquery/docs/data-manipulation-language#concurrent_jobs); the audit rows of
some hours are replaced by one ``MERGE ... ON FALSE`` (atomic), and a concurrent-update
conflict on it ("Could not serialize access ...") is retried by the query job retry, bounded.
"""

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from google.cloud import bigquery

from bq_platform.lib.warehouse import ledger, rules, schema
from bq_platform.lib.warehouse.schema import AUDIT_TABLE, audit_spec


class BigQuerySql:
    """Ledger and audit SQL of :class:`~bq_platform.lib.warehouse.bigquery.BigQueryWarehouse`."""

    client: bigquery.Client
    project: str
    dataset: str
    location: str
    retry: Any
    job_retry: Any
    request_timeout_s: float

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

    # -- publish ledger ----------------------------------------------------------------------

    def _ledger_rows(self, destination: str, partition: str) -> list[dict[str, Any]]:
        sql = (
            f"SELECT * FROM {self._sql_table(ledger.PUBLISH_LEDGER_TABLE)} "
            "WHERE destination = @destination AND partition_key = @partition_key "
            "ORDER BY published_at DESC, job_id DESC LIMIT 1"
        )
        rows = self._query(
            sql,
            [
                bigquery.ScalarQueryParameter("destination", "STRING", destination),
                bigquery.ScalarQueryParameter("partition_key", "STRING", partition),
            ],
        )
        return [dict(row.items()) for row in rows]

    def _append_ledger_row(self, row: Mapping[str, Any]) -> None:
        names = [c.name for c in ledger.LEDGER_COLUMNS]
        sql = (
            f"INSERT INTO {self._sql_table(ledger.PUBLISH_LEDGER_TABLE)} ({', '.join(names)}) "
            f"VALUES ({', '.join('@' + n for n in names)})"
        )
        params = [
            bigquery.ScalarQueryParameter(c.name, schema.normalize_type(c.type), row[c.name])
            for c in ledger.LEDGER_COLUMNS
        ]
        self._query(sql, params, dml=True)

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

    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        """``pageviews_audit`` rows with ``start <= hour < end``, ordered by hour and site.

        The query filters ``event_date`` too, so BigQuery prunes partitions.
        """
        spec = audit_spec()
        if AUDIT_TABLE not in self._existing():
            return []
        start_utc, end_utc = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
        sql = (
            "SELECT "
            + ", ".join(c.name for c in spec.columns)
            + f" FROM {self._sql_table(AUDIT_TABLE)} "
            "WHERE event_date BETWEEN @start_date AND @end_date "
            "AND hour >= @start AND hour < @end ORDER BY hour, site"
        )
        rows = self._query(
            sql,
            [
                bigquery.ScalarQueryParameter("start_date", "DATE", start_utc.date()),
                bigquery.ScalarQueryParameter("end_date", "DATE", end_utc.date()),
                bigquery.ScalarQueryParameter("start", "TIMESTAMP", start_utc),
                bigquery.ScalarQueryParameter("end", "TIMESTAMP", end_utc),
            ],
        )
        return [dict(row.items()) for row in rows]

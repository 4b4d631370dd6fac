"""BigQuery's documented rules for load and copy jobs, and for the rows a write into a
partition may hold (names, labels and tables: :mod:`bq_platform.lib.warehouse.rules`).
"""

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence

from bq_platform.lib.warehouse.rules import (
    MAX_COPY_SOURCES,
    MAX_LOAD_URIS,
    WRITE_DISPOSITIONS,
    check_destination,
    check_job_id,
    check_labels,
    refuse,
    split_destination,
)
from bq_platform.lib.warehouse.schema import Column, TableSpec, normalize_mode, normalize_type


def _check_job_basics(job_id: str, labels: Mapping[str, str], disposition: str) -> None:
    check_job_id(job_id)
    check_labels(labels, f"job {job_id}")
    if disposition not in WRITE_DISPOSITIONS:
        raise refuse(
            f"job {job_id}",
            f"write disposition {disposition!r}; one of {', '.join(sorted(WRITE_DISPOSITIONS))}",
            "/bigquery/docs/reference/rest/v2/Job#JobConfigurationLoad",
        )


def check_load_job(
    job_id: str,
    destination: str,
    source_uris: Sequence[str],
    schema: TableSpec,
    destination_spec: TableSpec,
    write_disposition: str,
    labels: Mapping[str, str],
) -> None:
    """Refuse a load job BigQuery would refuse.

    ``schema`` is the explicit schema the job sends; ``destination_spec`` the table's, as ensured.

    Raises:
        RuleViolation: no URI or more than 10,000, a URI with more than one ``*``, a schema
            that is not the destination's columns, or a rule of :func:`check_destination`.
    """
    _check_job_basics(job_id, labels, write_disposition)
    what = f"load job {job_id}"
    if not source_uris:
        raise refuse(what, "a load job needs at least one source URI", "/bigquery/quotas")
    if len(source_uris) > MAX_LOAD_URIS:
        raise refuse(
            what,
            f"{len(source_uris):,} source URIs; at most {MAX_LOAD_URIS:,} per load job (use one "
            "wildcard URI per folder)",
            "/bigquery/quotas#load_jobs",
        )
    for uri in source_uris:
        if uri.count("*") > 1:
            raise refuse(
                what,
                f"{uri}: at most one '*' wildcard per URI",
                "/bigquery/docs/batch-loading-data#load-wildcards",
            )
    check_destination(destination, destination_spec, what)
    if _column_types(schema.columns) != _column_types(destination_spec.columns):
        raise refuse(
            what,
            f"its explicit schema differs from table {destination_spec.name}'s columns",
            "/bigquery/docs/schemas#specifying_a_schema",
        )


def _column_types(columns: Iterable[Column]) -> list[tuple[str, str, str]]:
    return [(c.name, normalize_type(c.type), normalize_mode(c.mode)) for c in columns]


def check_copy_job(
    job_id: str,
    destination: str,
    sources: Sequence[str],
    source_specs: Mapping[str, TableSpec | None],
    destination_spec: TableSpec,
    write_disposition: str,
    labels: Mapping[str, str],
) -> None:
    """Refuse a copy job BigQuery would refuse.

    ``source_specs``: the spec of each source table (no decorator); None if it is missing.

    Raises:
        RuleViolation: no source or more than 1,200; a missing source; a source whose schema,
            partitioning or clustering differs from the destination's (BigQuery: ``Failed to
            copy Non partitioned table to Column partitioned table: not supported``); a rule
            of :func:`check_destination`.
    """
    _check_job_basics(job_id, labels, write_disposition)
    what = f"copy job {job_id}"
    if not sources:
        raise refuse(what, "a copy job needs at least one source table", "/bigquery/quotas")
    if len(sources) > MAX_COPY_SOURCES:
        raise refuse(
            what,
            f"{len(sources):,} source tables; at most {MAX_COPY_SOURCES:,} per copy job",
            "/bigquery/quotas#copy_jobs",
        )
    day = check_destination(destination, destination_spec, what)
    source_doc = "/bigquery/docs/managing-partitioned-tables#copy_partitions"
    for source in sources:
        name, source_day = split_destination(source)
        if day is not None and len(sources) > 1 and source_day != day:
            raise refuse(
                what,
                f"source {source}: a copy of several sources into the partition {destination} "
                f"takes each source's partition of that day ({name}${day:%Y%m%d})",
                "apache/beam PR 21757 (copy jobs do not support a partition destination); "
                "mozilla/bigquery-etl PR 2228 (partition ids on the sources)",
            )
        spec = source_specs.get(name)
        if spec is None:
            raise refuse(what, f"source table {name} does not exist (404 Not found)", source_doc)
        if spec.partition_field != destination_spec.partition_field:
            if destination_spec.partition_field and not spec.partition_field:
                rule = (
                    f"source {name} is not partitioned and {destination_spec.name} is "
                    "partitioned on a column: 'Failed to copy Non partitioned table to Column "
                    "partitioned table: not supported'"
                )
            else:
                rule = (
                    f"source {name} is partitioned on {spec.partition_field or 'nothing'}, "
                    f"{destination_spec.name} on {destination_spec.partition_field or 'nothing'}"
                    ": every source's partitioning must match the destination's"
                )
            raise refuse(what, rule, source_doc + " and apache/airflow PR 42130")
        if tuple(spec.clustering) != tuple(destination_spec.clustering):
            raise refuse(
                what,
                f"source {name} is clustered by {list(spec.clustering)}, "
                f"{destination_spec.name} by {list(destination_spec.clustering)}: clustering "
                "must match",
                "apache/beam#34571",
            )
        if _column_types(spec.columns) != _column_types(destination_spec.columns):
            raise refuse(
                what,
                f"source {name}'s schema differs from {destination_spec.name}'s",
                "/bigquery/docs/managing-tables#copy-table",
            )


def check_partition_rows(
    destination: str, day: dt.date, days_found: Iterable[dt.date | None]
) -> None:
    """Refuse a write into ``table$YYYYMMDD`` whose rows belong to other days (BigQuery checks
    this while the job runs; the local warehouse calls this with the values it found).

    Raises:
        RuleViolation: with BigQuery's error text, if a value is not ``day``.
    """
    others = sorted({str(d) for d in days_found if d != day})
    if others:
        raise refuse(
            f"the write into {destination}",
            "Some rows belong to different partitions rather than destination partition "
            f"{day:%Y%m%d} (found {', '.join(others[:3])})",
            "mozilla/bigquery-etl PR 4419; /bigquery/docs/managing-partitioned-table-data",
        )

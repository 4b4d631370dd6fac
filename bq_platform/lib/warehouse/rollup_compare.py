"""The comparison of a daily rollup's partition with the published ``pageviews`` rows of its
day, as one read-only SQL statement that both warehouses run (BigQuery: a query job, billed
for the day's ``site``, ``page_path``, ``traffic_class`` and ``visitor_id``).

The statement aggregates ``pageviews`` of the day as the rollup defines it
(:mod:`bq_platform.lib.daily_build.rollups`), joins it with the rollup's rows on the rollup's
key (``site``; by page ``site, page_path``) and returns one summary row (the number of keys
compared and, per measure, the number of keys whose value differs; its key columns NULL) and
one row per differing key among the first :data:`EXAMPLES` by key, with both values (its
summary columns NULL). A key that only one side has differs (its missing value is None). Its
parameters are the day (``DATE``) and the traffic class counted as human (``STRING``).

Only constructs that GoogleSQL and DuckDB both run: a ``FULL OUTER JOIN`` on the equality of
the key columns and ``UNION ALL``. BigQuery refuses an outer join whose condition is not an
equality of fields from both sides ("LEFT OUTER JOIN cannot be used without a condition that
is an equality of fields from both sides of the join"), so the summary and the examples are
two branches of a union, not a join ``ON TRUE``. No name is a GoogleSQL reserved keyword
(``ROLLUP`` is one: cloud.google.com/bigquery/docs/reference/standard-sql/lexical), which
neither DuckDB nor the emulator refuses.
"""

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bq_platform.lib.warehouse.schema import (
    DAILY_BY_PAGE_TABLE,
    DAILY_BY_SITE_TABLE,
    PAGEVIEWS_TABLE,
)

#: Each rollup's key columns.
KEYS: Mapping[str, tuple[str, ...]] = {
    DAILY_BY_SITE_TABLE: ("site",),
    DAILY_BY_PAGE_TABLE: ("site", "page_path"),
}
#: Each rollup's measures, as its columns name them.
MEASURES: Mapping[str, tuple[str, ...]] = {
    DAILY_BY_SITE_TABLE: ("human_pageviews", "bot_pageviews", "human_visitors"),
    DAILY_BY_PAGE_TABLE: ("human_pageviews", "human_visitors"),
}
#: Differing keys a comparison returns at most.
EXAMPLES = 20


@dataclasses.dataclass(frozen=True)
class RollupDifference:
    """One key whose values differ: ``published`` (from ``pageviews``) and ``rollup`` values
    per measure; None where that side has no row for the key."""

    key: tuple[str, ...]
    published: Mapping[str, int | None]
    rollup: Mapping[str, int | None]

    def differs(self, measure: str) -> bool:
        return self.published[measure] != self.rollup[measure]


@dataclasses.dataclass(frozen=True)
class RollupComparison:
    """What :func:`comparison_sql` found for one rollup and day.

    Attributes:
        keys_compared: keys on either side.
        differences: measure -> keys whose value differs.
        examples: the first :data:`EXAMPLES` differing keys, ordered by key.
    """

    table: str
    day: dt.date
    keys_compared: int
    differences: Mapping[str, int]
    examples: tuple[RollupDifference, ...]

    def differing(self, measures: Sequence[str]) -> list[RollupDifference]:
        """The examples whose value differs for one of ``measures``."""
        return [e for e in self.examples if any(e.differs(m) for m in measures)]


def _measure(measure: str, human: str) -> str:
    """The aggregate of ``pageviews`` rows that a rollup's ``measure`` holds."""
    is_human = f"traffic_class = {human}"
    if measure == "human_pageviews":
        return f"SUM(CASE WHEN {is_human} THEN 1 ELSE 0 END)"
    if measure == "bot_pageviews":
        return f"SUM(CASE WHEN {is_human} THEN 0 ELSE 1 END)"
    if measure == "human_visitors":
        return f"COUNT(DISTINCT CASE WHEN {is_human} THEN visitor_id END)"
    raise ValueError(f"unknown rollup measure {measure!r}")


def comparison_sql(table: str, table_ref: Callable[[str], str], param: Callable[[str], str]) -> str:
    """The statement for rollup ``table``. ``table_ref`` turns a table name into the
    backend's reference; ``param`` a parameter name (``day``, ``human``) into its placeholder
    (``@day``; DuckDB ``$day``). Raises ValueError if ``table`` is not a rollup table."""
    if table not in KEYS:
        raise ValueError(f"not a rollup table: {table!r}")
    keys, measures = KEYS[table], MEASURES[table]
    day, human = param("day"), param("human")
    key_list = ", ".join(keys)
    published_having = (
        f" HAVING {_measure('human_pageviews', human)} > 0" if table == DAILY_BY_PAGE_TABLE else ""
    )
    joined = ", ".join(
        [f"COALESCE(p.{k}, r.{k}) AS {k}" for k in keys]
        + [f"p.{m} AS published_{m}, r.{m} AS rollup_{m}" for m in measures]
    )
    differs = ", ".join(
        f"COALESCE(published_{m}, -1) <> COALESCE(rollup_{m}, -1) AS differs_{m}" for m in measures
    )
    counts = ", ".join(
        f"SUM(CASE WHEN differs_{m} THEN 1 ELSE 0 END) AS differences_{m}" for m in measures
    )
    any_differs = " OR ".join(f"differs_{m}" for m in measures)
    value_columns = [*keys, *(f"{side}_{m}" for m in measures for side in ("published", "rollup"))]
    summary_columns = ["keys_compared", *(f"differences_{m}" for m in measures)]
    order = ", ".join(keys)
    summary = (
        f"SELECT COUNT(*) AS keys_compared, {counts}, "
        + ", ".join(f"NULL AS {c}" for c in value_columns)
        + " FROM flagged"
    )
    examples = (
        "SELECT "
        + ", ".join([*(f"NULL AS {c}" for c in summary_columns), *value_columns])
        + f" FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY {order}) AS example FROM flagged "
        f"WHERE {any_differs}) AS ranked WHERE example <= {EXAMPLES}"
    )
    return (
        f"WITH published AS (SELECT {key_list}, "
        + ", ".join(f"{_measure(m, human)} AS {m}" for m in measures)
        + f" FROM {table_ref(PAGEVIEWS_TABLE)} WHERE event_date = {day} GROUP BY {key_list}"
        + published_having
        + f"), rolled AS (SELECT {key_list}, {', '.join(measures)} FROM {table_ref(table)} "
        f"WHERE event_date = {day}), "
        f"joined AS (SELECT {joined} FROM published AS p FULL OUTER JOIN rolled AS r ON "
        + " AND ".join(f"p.{k} = r.{k}" for k in keys)
        + f"), flagged AS (SELECT *, {differs} FROM joined) "
        f"{summary} UNION ALL {examples}"
    )


def comparison_result(
    table: str, day: dt.date, rows: Sequence[Mapping[str, Any]]
) -> RollupComparison:
    """The :class:`RollupComparison` of the rows :func:`comparison_sql` returned."""
    keys, measures = KEYS[table], MEASURES[table]
    first = next((row for row in rows if row.get("keys_compared") is not None), {})

    def number(value: Any) -> int | None:
        return None if value is None else int(value)

    examples = tuple(
        RollupDifference(
            key=tuple(str(row[k]) for k in keys),
            published={m: number(row[f"published_{m}"]) for m in measures},
            rollup={m: number(row[f"rollup_{m}"]) for m in measures},
        )
        for row in sorted(
            (row for row in rows if row.get(keys[0]) is not None),
            key=lambda row: tuple(str(row[k]) for k in keys),
        )
    )
    return RollupComparison(
        table=table,
        day=day,
        keys_compared=int(first.get("keys_compared") or 0),
        differences={m: int(first.get(f"differences_{m}") or 0) for m in measures},
        examples=examples,
    )

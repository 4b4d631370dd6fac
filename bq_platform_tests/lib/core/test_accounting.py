"""SiteHourCounts' JSON: what every hour manifest stores per site (its ``counts``)."""

import dataclasses
import datetime as dt
import json

from bq_platform.lib.core.accounting import AUDIT_COLUMNS, SiteHourCounts, audit_records
from bq_platform.lib.warehouse.compare import compare
from bq_platform.lib.warehouse.schema import audit_spec

COUNTS = SiteHourCounts(
    site="epa.gov",
    hour=dt.datetime(1995, 8, 30, 23, tzinfo=dt.UTC),
    source_lines=12,
    pageviews=5,
    non_page_hits=4,
    rejected=2,
    duplicates=1,
    lines_read=12,
    sample_rows=1,
    visitors=3,
    sample_visitors=1,
    files=2,
    rejected_reasons={"malformed": 1, "bad_status": 1},
    rejected_samples=("x y z", "\ufffd"),
)


def test_the_json_is_the_one_manifests_have_always_stored() -> None:
    # to_json is written field by field (asdict deep-copies); the document must stay
    # the one asdict gave, or the hour fingerprints over it would change.
    before = dataclasses.asdict(COUNTS) | {"hour": "1995-08-30T23:00:00+00:00"}
    assert json.dumps(COUNTS.to_json(), sort_keys=True) == json.dumps(before, sort_keys=True)
    assert list(COUNTS.to_json()) == [f.name for f in dataclasses.fields(SiteHourCounts)]


def test_round_trip_and_no_shared_state() -> None:
    data = COUNTS.to_json()
    assert SiteHourCounts.from_json(json.loads(json.dumps(data))) == COUNTS
    data["rejected_reasons"]["malformed"] = 99  # the document is a copy
    assert COUNTS.rejected_reasons["malformed"] == 1
    later = {**COUNTS.to_json(), "a_field_of_a_later_version": 1}
    assert SiteHourCounts.from_json(later) == COUNTS


def test_audit_rows_carry_human_and_bot_pages_in_the_table_order() -> None:
    split = dataclasses.replace(COUNTS, human_pageviews=2, bot_pageviews=3)
    (row,) = audit_records([split], "f" * 64, "run")
    assert tuple(row) == AUDIT_COLUMNS == audit_spec().column_names
    assert (row["pageviews"], row["human_pageviews"], row["bot_pageviews"]) == (5, 2, 3)
    assert split.classes_balanced
    assert not dataclasses.replace(split, bot_pageviews=2).classes_balanced


def test_an_audit_table_without_the_traffic_counts_gains_them_in_place() -> None:
    wanted = audit_spec()
    existing = dataclasses.replace(wanted, columns=wanted.columns[:-2])
    difference = compare(existing, wanted)
    assert difference.errors == ()
    assert [c.name for c in difference.added_columns] == ["human_pageviews", "bot_pageviews"]

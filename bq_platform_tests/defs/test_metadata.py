"""Job IDs in materialization metadata (:mod:`bq_platform.defs.metadata`): in production each
links to the job in the BigQuery console under the ID BigQuery knows (prefix included);
locally they are plain text."""

import dagster as dg

from bq_platform.defs.metadata import job_link, job_links_markdown
from bq_platform.defs.resources import BigQueryWarehouseResource, DuckDBWarehouseResource

BQ = BigQueryWarehouseResource(project="proj", dataset="ds", location="EU", job_id_prefix="dev_")
LOCAL = DuckDBWarehouseResource(path="unused.duckdb")
CONSOLE = "https://console.cloud.google.com/bigquery?project=proj&j=bq:EU:dev_bqp_1"


def test_one_job_links_to_the_console_under_its_prefixed_id() -> None:
    assert job_link(BQ, "bqp_1") == dg.MetadataValue.url(f"{CONSOLE}&page=queryresults")
    assert job_link(LOCAL, "bqp_1") == dg.MetadataValue.text("bqp_1")


def test_a_list_of_jobs_links_each_and_says_how_many_are_left_out() -> None:
    jobs = [("t1", "bqp_1", "submitted"), ("t2", "bqp_2", "skipped")]
    assert job_links_markdown(BQ, jobs, limit=1).value.splitlines() == [
        f"- `t1`: [dev_bqp_1]({CONSOLE}&page=queryresults) (submitted)",
        "- ... and 1 more",
    ]
    assert job_links_markdown(LOCAL, jobs).value.splitlines() == [
        "- `t1`: `bqp_1` (submitted)",
        "- `t2`: `bqp_2` (skipped)",
    ]
    assert job_links_markdown(LOCAL, []).value == "(no jobs)"

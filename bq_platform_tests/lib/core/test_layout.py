"""Names that become object keys, table names or job IDs are validated as a whole string."""

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.hours import parse_hour
from bq_platform.lib.core.job_ids import job_id
from bq_platform.lib.warehouse import rules
from bq_platform.lib.warehouse.bigquery.client import DATASET_RE, check_identifier

FINGERPRINT = "0123456789abcdef0123456789"


@pytest.mark.parametrize("site", ["epa.gov", "ksc.nasa.gov", "a", "x_1-2.example"])
def test_valid_site_names_are_kept(site):
    assert layout.validate_site(site) == site


@pytest.mark.parametrize(
    "site",
    ["x\n", "epa.gov\n", "\nx", "x\r", "../escape", "a/b", "", " ", "a b", "A", "ü", "a" * 101],
)
def test_a_site_name_with_a_trailing_newline_or_unsafe_characters_is_refused(site):
    with pytest.raises(ValueError, match="invalid site name"):
        layout.validate_site(site)
    with pytest.raises(ValueError, match="invalid site name"):
        layout.landing_registry_key(site, "access.log")


def test_identifiers_with_a_trailing_newline_are_refused():
    with pytest.raises(ValueError):
        job_id("load", "pageviews\n", "19950801", FINGERPRINT)
    with pytest.raises(ValueError):
        job_id("load", "pageviews", "19950801\n", FINGERPRINT)
    with pytest.raises(ValueError):
        job_id("load", "pageviews", "19950801", FINGERPRINT + "\n")
    with pytest.raises(ValueError):
        rules.check_job_id("bq_load_x\n")
    with pytest.raises(ValueError):
        rules.check_table_name("pageviews\n")
    with pytest.raises(ValueError):
        check_identifier("analytics\n", DATASET_RE, "dataset")
    with pytest.raises(ValueError):
        parse_hour("1995-08-01-04:00\n")
    assert job_id("load", "pageviews", "19950801", FINGERPRINT).endswith("_g0")
    assert rules.check_table_name("pageviews") == "pageviews"

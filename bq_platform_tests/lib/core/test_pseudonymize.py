"""visitor_id (HMAC-SHA256 in native Spark) and the 1-in-200 visitor sample."""

import contextlib
import hashlib
import hmac
import io

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from bq_platform.lib.core.pseudonymize import (
    SAMPLE_MODULUS,
    hmac_key_blocks,
    in_sample,
    in_sample_column,
    key_id,
    visitor_id,
    visitor_id_column,
)

# RFC 4231 (HMAC-SHA-256 test vectors), test cases 2, 6 and 7: a short key, and keys longer
# than the 64-byte block (which HMAC hashes first).
RFC4231 = [
    (
        b"Jefe",
        "what do ya want for nothing?",
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
    ),
    (
        b"\xaa" * 131,
        "Test Using Larger Than Block-Size Key - Hash Key First",
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
    ),
    (
        b"\xaa" * 131,
        "This is a test using a larger than block-size key and a larger than block-size data. "
        "The key needs to be hashed before being used by the HMAC algorithm.",
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
    ),
]

HOSTS = [
    "141.243.1.172",
    "ad12-049.compuserve.com",
    "2001:db8::7",
    "::1",
    "[fe80::1%eth0]",
    "caf\u00e9.example",  # non-ASCII: hashed as UTF-8
    "caf\ufffd",
    "",
]


def _spark_ids(spark, hosts: list[str | None], key: str | bytes) -> list[str | None]:
    frame = spark.createDataFrame(pa.table({"i": list(range(len(hosts))), "host": hosts}))
    rows = frame.select("i", visitor_id_column(F.col("host"), key, spark).alias("v")).collect()
    return [r["v"] for r in sorted(rows, key=lambda r: r["i"])]


@pytest.mark.parametrize(("key", "message", "mac"), RFC4231)
def test_spark_hmac_matches_rfc4231(spark, key: bytes, message: str, mac: str) -> None:
    assert visitor_id(key, message) == mac[:32]
    assert _spark_ids(spark, [message], key) == [mac[:32]]


@pytest.mark.parametrize("key", ["k", "a-realistic-secret-from-the-environment", "\u00e9" * 40])
def test_spark_visitor_id_equals_python_reference(spark, key: str) -> None:
    expected = [visitor_id(key, h) for h in HOSTS]
    assert _spark_ids(spark, [*HOSTS, None], key) == [*expected, None]
    assert all(len(v) == 32 and int(v, 16) >= 0 for v in expected)


def test_reference_is_hmac_sha256() -> None:
    want = hmac.new(b"secret", b"1.2.3.4", hashlib.sha256).hexdigest()[:32]
    assert visitor_id("secret", "1.2.3.4") == want
    assert visitor_id("secret", "1.2.3.4") != visitor_id("other", "1.2.3.4")


def test_key_blocks_follow_rfc2104() -> None:
    inner, outer = hmac_key_blocks("Jefe")
    assert inner == bytes(b ^ 0x36 for b in b"Jefe".ljust(64, b"\0"))
    assert outer == bytes(b ^ 0x5C for b in b"Jefe".ljust(64, b"\0"))
    long_inner, _ = hmac_key_blocks(b"\xaa" * 131)
    assert long_inner[:32] == bytes(b ^ 0x36 for b in hashlib.sha256(b"\xaa" * 131).digest())


def test_key_id_is_short_hash_and_not_the_key() -> None:
    assert key_id("secret") == hashlib.sha256(b"secret").hexdigest()[:16]
    assert "secret" not in key_id("secret")
    assert key_id("a") != key_id("b")


@pytest.mark.parametrize("call", [key_id, hmac_key_blocks, lambda k: visitor_id(k, "h")])
def test_empty_key_is_refused(call) -> None:
    with pytest.raises(ValueError, match="key is empty"):
        call("")


def test_key_never_appears_in_spark_plans(spark) -> None:
    key = "do-not-print-this-key"
    inner, outer = hmac_key_blocks(key)
    frame = spark.createDataFrame(pa.table({"host": ["1.2.3.4"]}))
    out = frame.select(visitor_id_column(F.col("host"), key, spark).alias("v"))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        out.explain(extended=True)
    plan = buffer.getvalue().lower()
    assert "subquery" in plan  # the blocks arrive through scalar subqueries
    for secret in (key.lower(), inner.hex(), outer.hex()):
        assert secret not in plan


@pytest.mark.parametrize(
    ("visitor", "expected"),
    [
        ("00000000" + "f" * 24, True),  # 0 % 200 == 0
        ("000000c8" + "0" * 24, True),  # 200
        ("000000c9" + "0" * 24, False),  # 201
        ("ffffffff" + "0" * 24, False),  # 4294967295 % 200 == 95
        ("0001d4c0" + "0" * 24, True),  # 120000
    ],
)
def test_in_sample_reference(visitor: str, expected: bool) -> None:
    assert in_sample(visitor) is expected


def test_sample_rate_is_one_in_200() -> None:
    n = 200_000
    sampled = sum(in_sample(visitor_id("k", f"host-{i}.example")) for i in range(n))
    expected = n / SAMPLE_MODULUS  # 1000; binomial sd ~ 31.5
    assert abs(sampled - expected) < 5 * (expected * (1 - 1 / SAMPLE_MODULUS)) ** 0.5


def test_spark_sample_equals_reference(spark) -> None:
    ids = [visitor_id("k", f"h{i}") for i in range(3000)] + ["ffffffff" + "0" * 24]
    frame = spark.createDataFrame(pa.table({"v": [*ids, None]}))
    rows = frame.select("v", in_sample_column(F.col("v")).alias("s")).collect()
    got = {r["v"]: r["s"] for r in rows}
    assert got.pop(None) is False
    assert got == {v: in_sample(v) for v in ids}
    assert 0 < sum(got.values()) < len(ids)

"""Pseudonymous visitor IDs and the 1-in-200 visitor sample.

``visitor_id`` is a keyed hash of the client host (address or name): the first 32 hex digits
(128 bits) of HMAC-SHA256(key, host as UTF-8). Without the key, the ID cannot be linked back to
an address by hashing candidate addresses (which an unkeyed hash of the 2**32 IPv4 addresses
would allow in minutes). The key comes from the environment; only its :func:`key_id` is ever
written down (in fingerprints and manifests), never the key.

HMAC is computed in Spark with native expressions, by the definition of RFC 2104 (and FIPS
198-1): ``H((K0 xor opad) || H((K0 xor ipad) || message))`` where ``K0`` is the key padded with
zeros to SHA-256's 64-byte block (or hashed first if longer), ``ipad`` = 0x36 and ``opad`` = 0x5c
repeated. The two padded key blocks are computed here in Python; Spark does
``sha2(concat(block, bytes), 256)`` twice. This works on every Spark 4 (the native ``hmac``
function only arrived in 4.3). :func:`visitor_id` (Python's :mod:`hmac`) is the reference, and
the tests check that both agree.

The blocks are as secret as the key (XOR with 0x36 gives it back), so they enter the Spark plan
as a one-row DataFrame read through scalar subqueries, not as literals: a literal would be
printed by ``explain()``, the Spark UI's SQL tab and the event log of a history server.

The sample: a visitor is in it iff ``int(visitor_id[:8], 16) % 200 == 0``, so a sampled
visitor's whole history is in the sample, on every re-run, with no state (DESIGN.md, "Sample").
"""

import hashlib
import hmac

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

#: 1 in SAMPLE_MODULUS visitors is in the sample: 200 -> 0.5%.
SAMPLE_MODULUS = 200
#: Hex digits of HMAC-SHA256 kept in visitor_id (128 bits: collisions are negligible).
VISITOR_ID_HEX_CHARS = 32
#: Hex digits of the key's SHA-256 kept in :func:`key_id`.
KEY_ID_HEX_CHARS = 16
#: Hex digits of visitor_id read as the sampling number.
SAMPLE_HEX_CHARS = 8
_BLOCK_SIZE = 64  # SHA-256 block size in bytes (FIPS 180-4)
_IPAD = 0x36
_OPAD = 0x5C


def _key_bytes(key: str | bytes) -> bytes:
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if not data:
        raise ValueError(
            "the visitor pseudonymization key is empty; set it in the environment "
            "(never in code) before building pageviews"
        )
    return data


def key_id(key: str | bytes) -> str:
    """Public identifier of a key: the first 16 hex digits of SHA-256(key).

    Safe to log and to put in fingerprints; changing the key changes every visitor_id, so the
    key ID is part of the output fingerprint (:func:`bq_platform.lib.core.job_ids.hour_fingerprint`).

    Raises:
        ValueError: if the key is empty.
    """
    return hashlib.sha256(_key_bytes(key)).hexdigest()[:KEY_ID_HEX_CHARS]


def hmac_key_blocks(key: str | bytes) -> tuple[bytes, bytes]:
    """The inner and outer padded key blocks of HMAC-SHA256 (RFC 2104, section 2).

    Returns:
        ``(K0 xor ipad, K0 xor opad)``, 64 bytes each.

    Raises:
        ValueError: if the key is empty.
    """
    k0 = _key_bytes(key)
    if len(k0) > _BLOCK_SIZE:
        k0 = hashlib.sha256(k0).digest()
    k0 = k0.ljust(_BLOCK_SIZE, b"\x00")
    return bytes(b ^ _IPAD for b in k0), bytes(b ^ _OPAD for b in k0)


def visitor_id(key: str | bytes, host: str) -> str:
    """Reference visitor ID: first 32 hex digits of HMAC-SHA256(key, host as UTF-8).

    Raises:
        ValueError: if the key is empty.
    """
    digest = hmac.new(_key_bytes(key), host.encode("utf-8"), hashlib.sha256).hexdigest()
    return digest[:VISITOR_ID_HEX_CHARS]


def in_sample(visitor: str, modulus: int = SAMPLE_MODULUS) -> bool:
    """Reference sampling rule: ``int(visitor[:8], 16) % modulus == 0``."""
    return int(visitor[:SAMPLE_HEX_CHARS], 16) % modulus == 0


def key_blocks_frame(spark: SparkSession, key: str | bytes) -> DataFrame:
    """One-row DataFrame ``(inner_block BINARY, outer_block BINARY)`` of :func:`hmac_key_blocks`.

    Built from an Arrow table: a local relation on the driver (``LocalTableScan``, whose plan
    string shows no values), with no Python worker to start.

    Raises:
        ValueError: if the key is empty.
    """
    inner_block, outer_block = hmac_key_blocks(key)
    table = pa.table(
        {
            "inner_block": pa.array([inner_block], pa.binary()),
            "outer_block": pa.array([outer_block], pa.binary()),
        }
    )
    return spark.createDataFrame(table)


def visitor_id_column(host: Column, key: str | bytes, spark: SparkSession) -> Column:
    """Spark expression of :func:`visitor_id` (native ``sha2``/``unhex``/``concat``, no UDF).

    Args:
        host: a STRING column (null gives null).
        key: the pseudonymization key. It reaches the executors as the two padded blocks,
            through scalar subqueries over :func:`key_blocks_frame`, so no plan string shows it.
        spark: the session that evaluates the expression.

    Returns:
        A STRING column of 32 lower-case hex digits.

    Raises:
        ValueError: if the key is empty.
    """
    blocks = key_blocks_frame(spark, key)
    inner_block = blocks.select("inner_block").scalar()
    outer_block = blocks.select("outer_block").scalar()
    message = F.encode(host, "UTF-8")
    inner = F.unhex(F.sha2(F.concat(inner_block, message), 256))
    outer = F.sha2(F.concat(outer_block, inner), 256)
    return F.substring(outer, 1, VISITOR_ID_HEX_CHARS)


def in_sample_column(visitor: Column, modulus: int = SAMPLE_MODULUS) -> Column:
    """Spark expression of :func:`in_sample`; false (never null) when ``visitor`` is null."""
    number = F.conv(F.substring(visitor, 1, SAMPLE_HEX_CHARS), 16, 10).try_cast("bigint")
    return F.coalesce(F.pmod(number, F.lit(modulus)) == 0, F.lit(False))

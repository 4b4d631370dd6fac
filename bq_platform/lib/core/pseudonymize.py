"""Pseudonymous visitor IDs and the 1-in-200 visitor sample.

``visitor_id`` is the first 32 hex digits (128 bits) of HMAC-SHA256(key, host as UTF-8): keyed,
so it cannot be linked back to an address by hashing all 2**32 IPv4 addresses. The key comes
from the environment; only its :func:`key_id` is ever written down.

Spark computes HMAC natively by its definition (RFC 2104): ``H((K0 xor opad) || H((K0 xor ipad)
|| message))``. The padded key blocks are as secret as the key, so they enter the plan through
scalar subqueries, never as literals that ``explain()`` or the Spark UI would print.

The sample: a visitor is in it iff ``int(visitor_id[:8], 16) % 200 == 0``, so a sampled
visitor's whole history is in it, on every re-run, with no state (DESIGN.md, "Sample").
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
    """Public identifier of a key: the first 16 hex digits of SHA-256(key); safe to log.

    Raises:
        ValueError: if the key is empty.
    """
    return hashlib.sha256(_key_bytes(key)).hexdigest()[:KEY_ID_HEX_CHARS]


def hmac_key_blocks(key: str | bytes) -> tuple[bytes, bytes]:
    """``(K0 xor ipad, K0 xor opad)`` of HMAC-SHA256, 64 bytes each (RFC 2104, section 2).

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
    """One-row DataFrame ``(inner_block BINARY, outer_block BINARY)`` of :func:`hmac_key_blocks`
    (a local relation from Arrow: its plan string shows no values).

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

    ``host`` is a STRING column (null gives null); the result is 32 lower-case hex digits.

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

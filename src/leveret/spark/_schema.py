"""The connector's Spark schema (the Arrow one lives in ``_arrow``; a test keeps them equal)."""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from leveret.spark._arrow import PROPERTY_FIELDS

__all__ = ["PROPERTIES_STRUCT", "READ_STRUCT"]

_INTS = frozenset(("delivery_mode", "priority"))

PROPERTIES_STRUCT = StructType(
    [
        StructField(name, IntegerType() if name in _INTS else StringType(), True)
        for name in PROPERTY_FIELDS
    ]
)

READ_STRUCT = StructType(
    [
        StructField("value", BinaryType(), True),
        StructField("routing_key", StringType(), True),
        StructField("exchange", StringType(), True),
        StructField("queue", StringType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("redelivered", BooleanType(), True),
        StructField("headers", MapType(StringType(), StringType(), True), True),
        StructField("properties", PROPERTIES_STRUCT, True),
    ]
)

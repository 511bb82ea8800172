"""The sink: confirms, deterministic ids, routing, and de-duplication of replays on streams."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tests.spark import support

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def test_batch_write_confirms_with_deterministic_ids(
    spark_session: SparkSession, amqp_url: str, name: str
) -> None:
    support.declare(amqp_url, name)
    try:
        df = spark_session.range(0, 3000, numPartitions=2).selectExpr(
            "CAST(id AS STRING) AS value", "map('k', CAST(id % 3 AS STRING)) AS headers"
        )
        (
            df.write.format("amqp")
            .option("uri", amqp_url)
            .option("routingKey", name)
            .option("messageIdPrefix", "job7")
            .option("maxInFlight", "100")
            .mode("append")
            .save()
        )
        messages = support.drain(amqp_url, name)
        assert sorted(int(body) for body, _, _ in messages) == list(range(3000))
        ids = set()
        for body, props, _ in messages:
            assert props.delivery_mode == 2
            assert props.headers is not None
            producer = props.headers["x-stream-producer"]
            sequence = props.headers["x-stream-sequence"]
            assert isinstance(producer, str)
            assert isinstance(sequence, int)
            assert producer in ("job7-0-0", "job7-0-1")
            assert props.message_id == f"{producer}-{sequence}"
            assert props.headers["k"] == str(int(body) % 3)
            ids.add(props.message_id)
        assert len(ids) == 3000
    finally:
        support.delete(amqp_url, name)


def test_routing_key_column_and_mandatory(
    spark_session: SparkSession, amqp_url: str, name: str
) -> None:
    a, b = f"{name}.a", f"{name}.b"
    support.declare(amqp_url, a)
    support.declare(amqp_url, b)
    try:
        df = spark_session.createDataFrame(
            [(b"1", a), (b"2", b), (b"3", a)], "value BINARY, routing_key STRING"
        )
        df.write.format("amqp").option("uri", amqp_url).option("persistent", "false").mode(
            "append"
        ).save()
        got_a = support.drain(amqp_url, a)
        assert sorted(body for body, _, _ in got_a) == [b"1", b"3"]
        assert [body for body, _, _ in support.drain(amqp_url, b)] == [b"2"]
        assert got_a[0][1].delivery_mode is None
        unroutable = spark_session.createDataFrame([(b"x",)], "value BINARY")
        with pytest.raises(Exception, match="312"):
            unroutable.write.format("amqp").option("uri", amqp_url).option(
                "routingKey", f"{name}.nowhere"
            ).option("mandatory", "true").mode("append").save()
        with pytest.raises(Exception, match="unknown columns"):
            spark_session.createDataFrame([(b"x", 1)], "value BINARY, n INT").write.format(
                "amqp"
            ).option("uri", amqp_url).option("routingKey", a).mode("append").save()
    finally:
        support.delete(amqp_url, a)
        support.delete(amqp_url, b)


def test_stream_write_uses_query_id_and_batch_id(
    spark_session: SparkSession, amqp_url: str, name: str, tmp_path: Path
) -> None:
    support.declare(amqp_url, name)
    source = tmp_path / "in"
    spark_session.range(0, 50, numPartitions=1).selectExpr(
        "CAST(id AS STRING) AS value"
    ).write.parquet(str(source))
    try:
        q = (
            spark_session.readStream.schema("value STRING")
            .parquet(str(source))
            .writeStream.format("amqp")
            .option("uri", amqp_url)
            .option("routingKey", name)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        messages = support.drain(amqp_url, name)
        assert sorted(int(body) for body, _, _ in messages) == list(range(50))
        producers = {p.headers["x-stream-producer"] for _, p, _ in messages if p.headers}
        assert producers == {f"{q.id}-0-0"}
    finally:
        support.delete(amqp_url, name)


def test_replayed_write_is_deduplicated_on_leveret_streams(
    spark_session: SparkSession, stream_url: str, broker_product: str, name: str
) -> None:
    if broker_product != "Leveret":
        pytest.skip("publish de-duplication is a Leveret stream feature")
    support.declare_stream(stream_url, name)
    prefix = f"replay-{uuid.uuid4().hex[:6]}"
    try:
        df = spark_session.range(0, 2000, numPartitions=2).selectExpr(
            "to_json(named_struct('id', id)) AS value"
        )
        for _ in range(2):  # the second run is a replay: same ids, all dropped by the broker
            df.write.format("amqp").option("uri", stream_url).option("routingKey", name).option(
                "messageIdPrefix", prefix
            ).mode("append").save()
        rows = support.read_stream(stream_url, name)
        assert sorted(json.loads(body)["id"] for _, body in rows) == list(range(2000))
    finally:
        support.delete(stream_url, name)


def test_stream_protocol_write_replays_publish_nothing_twice(
    spark_session: SparkSession, stream_url: str, stream_port: int, name: str
) -> None:
    """Over the stream protocol the publisher reference de-duplicates (RabbitMQ's too): a
    replayed write, and a retried task, add nothing."""
    support.declare_stream(stream_url, name)
    prefix = f"sp-{uuid.uuid4().hex[:6]}"
    try:
        df = spark_session.range(0, 3000, numPartitions=2).selectExpr(
            "to_json(named_struct('id', id)) AS value"
        )
        for _ in range(2):
            df.write.format("amqp").option("uri", stream_url).option("protocol", "stream").option(
                "streamPort", str(stream_port)
            ).option("stream", name).option("messageIdPrefix", prefix).mode("append").save()
        rows = support.read_stream(stream_url, name)
        assert sorted(json.loads(body)["id"] for _, body in rows) == list(range(3000))
        # A bigger rerun of partition 0 (a task that now sees more rows) adds only the rest.
        more = spark_session.range(0, 2000, numPartitions=1).selectExpr(
            "to_json(named_struct('id', id + 10000)) AS value"
        )
        more.write.format("amqp").option("uri", stream_url).option("protocol", "stream").option(
            "streamPort", str(stream_port)
        ).option("stream", name).option("messageIdPrefix", prefix).mode("append").save()
        ids = sorted(json.loads(body)["id"] for _, body in support.read_stream(stream_url, name))
        # Partition 0 of the first write had rows 0..1499: rows 1500..1999 of the rerun are new.
        assert ids == sorted([*range(3000), *range(11500, 12000)])
    finally:
        support.delete(stream_url, name)


def test_stream_protocol_write_keeps_headers_and_properties(
    spark_session: SparkSession, stream_url: str, stream_port: int, name: str
) -> None:
    """What the stream sink writes reads back the same over either protocol."""
    support.declare_stream(stream_url, name)
    try:
        df = spark_session.range(0, 200, numPartitions=2).selectExpr(
            "CAST(id AS STRING) AS value",
            "map('k', CAST(id % 3 AS STRING), 'fixed', 'f') AS headers",
            "named_struct('content_type', 'text/plain', 'message_id', CONCAT('m', id),"
            " 'priority', 5, 'type', 'kind', 'app_id', 'app') AS properties",
        )
        df.write.format("amqp").option("uri", stream_url).option(
            "streamPort", str(stream_port)
        ).option("routingKey", name).mode("append").save()

        def read(protocol: str) -> list[tuple[Any, ...]]:
            got = (
                spark_session.read.format("amqp")
                .option("uri", stream_url)
                .option("queue", name)
                .option("protocol", protocol)
                .option("streamPort", str(stream_port))
                .load()
                .selectExpr("CAST(value AS STRING) v", "headers", "properties")
                .collect()
            )
            return sorted((r.v, sorted(r.headers.items()), r.properties) for r in got)

        by_stream = read("stream")
        assert len(by_stream) == 200
        v, headers, props = by_stream[0]
        assert headers == [("fixed", "f"), ("k", str(int(str(v)) % 3))]
        assert props.content_type == "text/plain"
        assert props.message_id == f"m{v}"
        assert (props.priority, props.type, props.app_id) == (5, "kind", "app")
        assert props.delivery_mode == 2
        assert read("amqp") == by_stream
    finally:
        support.delete(stream_url, name)

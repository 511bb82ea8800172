"""PySpark data source for AMQP 0-9-1 brokers (Leveret, RabbitMQ): ``format("amqp")``.

Install with ``pip install 'leveret[spark]'``, then register once per session::

    from leveret.spark import AmqpDataSource
    spark.dataSource.register(AmqpDataSource)

See ``docs/spark.md`` for the options, the row schema and the guarantees.
"""

from __future__ import annotations

from leveret.spark.source import AmqpDataSource

__all__ = ["AmqpDataSource"]

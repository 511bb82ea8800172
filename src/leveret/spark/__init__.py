"""PySpark data source for Leveret and RabbitMQ: ``format("amqp")``; stream queues over
RabbitMQ's stream protocol where the broker serves it, any queue over AMQP 0-9-1.

Install with ``pip install 'leveret[spark]'``, then register once per session::

    from leveret.spark import AmqpDataSource
    spark.dataSource.register(AmqpDataSource)

See ``docs/spark.md`` for the options, the row schema and the guarantees.
"""

from __future__ import annotations

from leveret.spark.source import AmqpDataSource

__all__ = ["AmqpDataSource"]

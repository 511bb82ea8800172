"""Differential conformance: Leveret measured against RabbitMQ 3.10.8.

Two parts (docs/compatibility.md, "Conformance"): the harness that runs client libraries'
own integration suites on both brokers (``python -m conformance run``; ``suites``,
``harness``, ``compare``, ``brokers``, ``plugins/``), and the side-by-side scenarios
(``wire``, ``scenarios``, ``record``) whose RabbitMQ outcomes are recorded in
``recorded.json`` and checked against Leveret by ``tests/conformance``. Nothing in
``leveret`` imports this package; it imports ``leveret`` only for the client-role codec.
"""

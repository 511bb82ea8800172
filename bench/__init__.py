"""Leveret's benchmark: a PerfTest-style load generator and a side-by-side runner.

``python -m bench.loadgen`` drives one broker and prints one JSON line;
``python -m bench.run`` starts Leveret and RabbitMQ and compares them (docs/benchmarks.md).
"""

from __future__ import annotations

"""The fault-injection harness (issue 25, "Safety, measured as Jepsen measures it";
docs/faults.md): ``python -m tools.faults`` starts a Leveret or RabbitMQ cluster, runs
publishers with confirms and consumers with acks through it, kills, pauses, partitions
and slows its nodes (and etcd), drains it, and checks that nothing confirmed was lost.

- ``runner.py``: one run, its cycles of faults, the drain; ``__main__.py`` its CLI.
- ``workload.py``: the clients; ``history.py``: what they saw; ``checker.py``: the verdict;
  ``report.py``: ``result.json`` and ``summary.md``.
- ``targets/``: the clusters under test (``leveret.py``, ``rabbitmq.py``).
- ``proxy.py``: the fault-injecting TCP proxy on every path between nodes and to etcd;
  ``epmd.py``: Erlang's port mapper, so RabbitMQ's nodes dial each other through it;
  ``slowdisk.py``: a node's disk slowed by the kernel's block I/O throttle.
"""

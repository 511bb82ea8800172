"""Links between brokers: RabbitMQ's dynamic shovels and federation, run inside the broker.

Above ``server/`` (it opens connections to this broker through its front ends, as any
client does, and to other brokers over the network) and beside ``management/``, which
shows what it runs. ``leveret/assembly.py`` plugs it into the server. Map:

- ``uri.py``: RabbitMQ's AMQP URIs (0-9-1 and 1.0 readings, ``redact``).
- ``amqp091.py``, ``amqp10.py``: asyncio clients on the project's sans-IO client machines
  (``protocol/amqp091/client.py``, ``protocol/amqp10/connection.py``); ``local.py`` opens
  one into this broker through a socket pair.
- ``shovel_config.py``: the ``shovel`` parameter's keys, checked as RabbitMQ checks them.
- ``shovel.py``, ``shovel_ends.py``: one running shovel (source, destination, ack modes,
  delete-after, reconnect delay) and its two ends per protocol.
- ``federation_config.py``, ``federation.py``, ``federation_link.py``,
  ``federation_exchange.py``, ``federation_queue.py``: upstreams, upstream sets, the policy
  keys, the links the policies ask for, and the two kinds of federation link.
- ``supervisor.py``: the ``Links`` plug-in: what runs for the current parameters and
  policies, restarts, status rows (``/api/shovels``, ``/api/federation-links``, ctl),
  counters (Prometheus); ``verbs.py`` its ctl verbs; ``status.py`` what they all share.
- ``migration.py``: ``python -m leveret.links.migration``, the shovels of
  ``docs/migration.md``.
"""

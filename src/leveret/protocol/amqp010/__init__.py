"""AMQP 0-10: codec, framing and the sans-IO connection and session machines.

The generated controls, commands, structs and constants come from the spec XML
(``python -m tools.codegen.amqp010``); the rest is hand-written.  Nothing here imports the
broker: a front end drives :class:`~leveret.protocol.amqp010.connection.Connection`.
"""

from __future__ import annotations

"""AMQP 0-10: codec, framing and the sans-IO connection and session machines.

The generated controls, commands, structs and constants come from the spec XML
(``python -m tools.codegen.amqp010``); the rest is hand-written.  Nothing here imports the
broker: a front end drives :class:`~leveret.protocol.amqp010.connection.Connection`.

The generated structs are imported here because importing them registers their table
with the value codec (``types.register_structs``): whatever module of the package is used,
a struct32 decodes to its class.
"""

from __future__ import annotations

from leveret.protocol.amqp010._generated import structs as structs

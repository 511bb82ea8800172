"""AMQP 0-8: the method set generated from the 0-8 spec XML, and what differs from 0-9-1.

Sans-IO like ``leveret.protocol.amqp091`` (bytes in, objects out); a front end for clients
that send the ``AMQP 1 1 8 0`` header imports it. Frames have the 0-9-1 layout
(``leveret.protocol.amqp08.framing``); field tables carry fewer types
(``leveret.protocol.amqp08.fieldtable``); the methods differ in ids and fields
(``_generated/methods.py``: ``connection.close`` is 10/60, ``basic.recover`` 60/100 without a
reply, ``channel.alert``, ``access.request``, the ``file``, ``stream``, ``tunnel``, ``dtx`` and
``test`` classes).
"""

from __future__ import annotations

"""The broker's AMQP 0-10 front end: the protocol's machine (``protocol/amqp010``) mapped
onto the broker core (``model/``). ``server/connection.py`` drives it from asyncio; the
header ``AMQP 1 1 0 10`` chooses it (``server/frontend.py``)."""

from __future__ import annotations

from leveret.server.amqp010.connection import AMQP010Connection, table_of

__all__ = ["AMQP010Connection", "table_of"]

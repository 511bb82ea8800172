"""The broker's AMQP 0-9-1 front end: the protocol's machine (``protocol/amqp091``) mapped
onto the broker core (``model/``). ``server/connection.py`` drives it from asyncio."""

from __future__ import annotations

from leveret.server.amqp091.connection import AMQP091Connection, Limits

__all__ = ["AMQP091Connection", "Limits"]

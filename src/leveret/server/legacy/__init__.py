"""The broker's AMQP 0-8 and 0-9 front ends: the 0-9-1 front end (``server/amqp091``) with
the versions' differences translated at its edge, and the classes only they have.
``server/frontend.py`` picks them from the protocol header."""

from __future__ import annotations

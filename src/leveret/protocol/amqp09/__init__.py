"""AMQP 0-9 (header ``AMQP 1 1 0 9``) and the 0-9 working draft (major 99): method sets.

Sans-IO like ``leveret.protocol.amqp091``. ``_generated/`` is the 0-9 method set (0-9-1's
classes plus ``access``, ``file``, ``stream``, ``tunnel``, ``dtx``, the reference-based
``message`` class and ``channel.ok``/``resume``/``ping``/``pong``); ``draft/_generated/`` is
the working draft's (``session``, ``dtx-demarcation``, ``dtx-coordination``, ``binding``,
``execution``, result structs). The two cannot share one table: the draft reuses 0-9's class
ids (20 is ``channel`` in 0-9 and ``session`` in the draft). ``wiretypes`` holds the codecs of
the value types 0-9-1 does not have; ``framing`` the frame types. A front end imports these.
"""

from __future__ import annotations

"""Message conversion: one home for how a message published in one protocol is kept, stored
and given to a consumer of another (RabbitMQ's ``mc`` and its ``mc_*`` modules).

A ``Message`` (``model/message.py``) keeps what arrived on the wire in one of two forms,
0-9-1's or 1.0's (``formats.py``), and is converted only when a consumer of another
protocol takes it: same-protocol deliveries re-send the original bytes. The 0-9-1 form is
the pivot: 0-10, 0-8/0-9 and AMQP/Fast map their properties onto it field by field, and the
one 0-9-1 <-> 1.0 table joins the two forms. One module per protocol:

====================  ======================================================================
``formats.py``        the form numbers; a message's 0-9-1 parts; messages rebuilt from the
                      store, a page or a stream log (``mc.erl``)
``amqp091.py``        the 0-9-1 form: properties decoded lazily, re-encoded with changes,
                      the hints read from the flag bytes (``mc_amqpl``'s container side)
``amqp10.py``         the 1.0 form: the sections kept byte for byte, what the model reads of
                      them, what a 1.0 consumer is sent (``mc_amqp``)
``amqp10_amqp091.py`` the one 0-9-1 <-> 1.0 table, both ways (RabbitMQ 4's; compiled)
``amqp10_sections.py`` its 0-9-1 -> 1.0 direction written directly for the common values
                      (compiled; checked byte for byte against the general one)
``amqp010.py``        AMQP 0-10 header structs <-> 0-9-1 properties
``legacy.py``         the 0-8/0-9 ``file``, ``stream`` and ``message`` classes <-> 0-9-1
``amqpfast.py``       AMQP/Fast message headers <-> 0-9-1
``stream_records.py`` the record a stream stores (1.0, the stream protocol's form) and the
                      message a stream reader gets back
``stream_reads.py``   a stored chunk decoded for readers in one pass (compiled)
``stream_stamp.py``   ``x-stream-offset`` / ``x-stream-timestamp`` added for stream readers
                      (compiled)
====================  ======================================================================

The layer sits above ``protocol/`` and ``model/`` and below ``server/``: it imports codecs
and model types only, no asyncio, socket or clock (``tests/unit/test_layers.py``), so the
front ends, the store's recovery, management and ``leveret.testing`` share it.
"""

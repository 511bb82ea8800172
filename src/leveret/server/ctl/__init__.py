"""``leveret ctl``'s server side: the Unix socket it speaks to (``unix_socket.py``), the verb
table and the auth registry's verbs (``admin.py``), and the verbs on the model's entities
(``entities.py``), on messages (``messages.py``) and on super streams (``streams.py``)."""

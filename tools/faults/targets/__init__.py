"""The clusters the fault harness runs: ``base.py`` (what a target and a node are),
``leveret.py``, ``rabbitmq.py``; ``http.py`` the management API calls they share."""

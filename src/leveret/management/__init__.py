"""The management plane: RabbitMQ's management HTTP API and web UI (port 15672) and the
Prometheus endpoint (port 15692), served on the broker's own event loop.

```
 app.py         aiohttp application: routes, basic auth, errors as RabbitMQ shapes them
 plane.py       what the parts are handed (Protocols): the server's host, the management server
 errors.py      the HTTP errors endpoints raise (RabbitMQ's 400 and 404)
 authz.py       who may do what (RabbitMQ's user tags)
 api.py         the routes; api_objects.py (vhost contents), api_admin.py (vhosts, users,
                permissions, limits), api_runtime.py (policies, parameters, definitions),
                api_base.py (what they share)
 shapes.py      the JSON of queues, exchanges, connections, channels, ... (RabbitMQ's fields):
                server/rows.py's rows, which leveret ctl shows too, with statistics added
 query.py       paging, sorting, filtering and column selection of lists
 stats.py       the sampler: reads the core's plain counters on a timer, keeps samples, rates
 prometheus.py  RabbitMQ's metric names through prometheus_client's text format
 static/        the web UI (plain HTML, CSS and JavaScript; no build step)
```

It reads the running server through ``server.ctl.admin.AdminHost`` (plus the runtime
parameters of ``server/parameters.py`` and the sampler) and changes it through the same calls
as ``leveret ctl``. ``leveret/assembly.py`` plugs it into the server, which starts it;
nothing in the broker imports it.
"""

from __future__ import annotations

from leveret.management.app import ManagementServer

__all__ = ["ManagementServer"]

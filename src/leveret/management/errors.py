"""The HTTP errors an endpoint raises, as RabbitMQ shapes them (``{"error": ..., "reason":
...}`` with its status): ``app.py``'s middleware answers them. Imported by the endpoint
modules (``api_*.py``) and ``app.py``; imports nothing of Leveret."""

from __future__ import annotations


class HttpError(Exception):
    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason


def not_found() -> HttpError:
    return HttpError(404, "Object Not Found", "Not Found")


def bad_request(reason: str) -> HttpError:
    return HttpError(400, "bad_request", reason)

"""A small Celery application that test_celery.py runs in a real worker against the broker."""

from __future__ import annotations

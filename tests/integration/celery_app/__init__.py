"""Celery applications that test_celery.py (tasks) and test_celery_features.py (features) run
in a real worker against the broker."""

from __future__ import annotations

"""The link's codec as released at main on 2026-11-28 (2766635), kept in ``data/``: what a
node of that version writes and reads, for the tests of rolling upgrades and of the wire
format's bytes."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

_SOURCE = Path(__file__).parent / "data" / "cluster_codec_2026_11_28.py.txt"


def released_codec() -> Any:
    name = "leveret_cluster_codec_2026_11_28"
    module = sys.modules.get(name)
    if module is None:
        loader = SourceFileLoader(name, str(_SOURCE))
        spec = importlib.util.spec_from_loader(name, loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        assert isinstance(module, ModuleType)
        sys.modules[name] = module  # dataclasses look their module up
        loader.exec_module(module)
    return module

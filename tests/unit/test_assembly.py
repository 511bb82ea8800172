"""``assembly.serve`` runs the broker outside the ``except ImportError`` that chose the event
loop, so nothing the broker raises or logs carries "No module named 'uvloop'" as its cause."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pytest

from leveret import assembly

if TYPE_CHECKING:
    from leveret.config import Settings


class _Failing:
    async def run(self) -> None:
        raise RuntimeError("a bug of the broker's")


@pytest.mark.parametrize("uvloop_installed", [False, True])
def test_an_error_of_the_broker_has_no_import_error_as_its_context(
    monkeypatch: pytest.MonkeyPatch, uvloop_installed: bool
) -> None:
    if uvloop_installed:
        pytest.importorskip("uvloop")
    else:
        monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop: ImportError

    def build(settings: Settings) -> Any:
        return _Failing()

    monkeypatch.setattr(assembly, "build_server", build)
    with pytest.raises(RuntimeError, match="a bug") as caught:
        assembly.serve(None)  # type: ignore[arg-type]
    assert caught.value.__context__ is None
    assert caught.value.__cause__ is None

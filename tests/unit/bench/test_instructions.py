"""``bench.instructions``: callgrind counts inside the shell's entry points, named exactly
(wildcards lost ``run_turn``'s share, and would toggle off inside the front end's own
``take_output``), and those names are the compiled build's symbols."""

from __future__ import annotations

from pathlib import Path

import pytest

import leveret
from bench import instructions
from leveret import build_info
from leveret.server.shell.shell import Shell


def test_each_entry_point_is_one_exact_toggle() -> None:
    options = instructions.toggles()
    assert options == [
        "--toggle-collect=CPyPy_shell___Shell___data_received",
        "--toggle-collect=CPyPy_shell___Shell___run_turn",
        "--toggle-collect=CPyPy_shell___Shell___take_output",
    ]
    for entry in instructions.SERVER_ENTRIES:
        assert callable(getattr(Shell, entry))


def test_another_class_for_a_build_from_before_the_shell() -> None:
    options = instructions.toggles("protocol___amqp091___connection___ServerConnection")
    assert options[1] == (
        "--toggle-collect=CPyPy_protocol___amqp091___connection___ServerConnection___run_turn"
    )


def test_the_compiled_build_has_the_symbols() -> None:
    if "leveret.server.shell.shell" not in build_info.compiled_modules():
        pytest.skip("the pure-Python build has no compiled entry points")
    libraries = sorted(Path(leveret.__file__).parent.parent.glob("leveret__mypyc*.so"))
    assert len(libraries) == 1, libraries
    data = libraries[0].read_bytes()
    for option in instructions.toggles():
        symbol = option.removeprefix("--toggle-collect=").encode()
        assert symbol + b"\0" in data, symbol

"""The README's examples: the one of worker processes runs as it is written and prints what it
says; the C one is part of an example program that the C tests build and run."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_s_process_session_example_prints_42():
    text = README.read_text()
    block = re.search(r"Worker processes \(Python.*?```python\n(.*?)```", text, re.S)
    assert block, "the README's example of worker processes is missing"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.group(1), str(README), "exec"), {})  # noqa: S102 - our own README
    assert out.getvalue().split() == ["42"]


def test_the_readme_s_c_example_is_part_of_the_demo_program():
    text = README.read_text()
    block = re.search(r"```c\n(.*?)```", text, re.S)
    assert block, "the README's C example is missing"
    demo = (README.parent / "examples-c" / "session_broadcast.c").read_text()
    assert block.group(1) in demo

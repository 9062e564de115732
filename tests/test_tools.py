"""The GPU-side scripts in tools/ run only on a GPU machine: here at least their syntax is checked.
(lab/ holds experiments and measurement scripts outside the product; nothing tests them.)"""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", sorted((ROOT / "tools").glob("*.py")), ids=lambda p: p.name)
def test_tool_scripts_compile(script):
    compile(script.read_text(), str(script), "exec")

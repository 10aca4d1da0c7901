"""test_examples.py — the examples a user copies from (examples/moe_layer.py, examples/cp_attention.py) run on
the host backend, each as its own program (`python examples/X.py --host N`, small sizes), and pass every check
against their one-process references. On the GPU machine run them under the launcher instead
(`build/bin/syrun -n 2 python examples/moe_layer.py`): that path (two streams, the CUDA graph) is theirs alone."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the examples need torch")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    "example,world,checks_per_rank",
    [("moe_layer.py", 3, 7), ("cp_attention.py", 4, 8)],
)
def test_example_host(example: str, world: int, checks_per_rank: int) -> None:
    result = subprocess.run([sys.executable, str(EXAMPLES / example), "--host", str(world)], capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert "FAIL" not in log, log
    assert log.count("PASS") == world * checks_per_rank, log

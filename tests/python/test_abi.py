"""test_abi.py — the package's ctypes structs have the C header's layout: a small C program built against
include/switchyard.h prints every field's offset and each struct's size, compared with ctypes' (a field the
header adds or moves shows here). Skips where there is no C compiler or no CUDA headers (switchyard.h includes
cuda_runtime_api.h)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

from switchyard import _lib, attn, orchestration

STRUCTS = {**_lib.STRUCTS, **attn.STRUCTS, **orchestration.STRUCTS}

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CUDA_INCLUDE = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")


def test_struct_layouts(tmp_path) -> None:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None or not os.path.exists(os.path.join(CUDA_INCLUDE, "cuda_runtime_api.h")):
        pytest.skip(f"needs a C compiler and the CUDA headers ({CUDA_INCLUDE})")
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <switchyard.h>", "int main(void) {"]
    for c_name, struct in STRUCTS.items():
        lines.append(f'  printf("{c_name} size %zu\\n", sizeof({c_name}));')
        for field, _ in struct._fields_:
            lines.append(f'  printf("{c_name} {field} %zu\\n", offsetof({c_name}, {field}));')
    lines += ["  return 0;", "}"]
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "abi"
    subprocess.run([cc, "-I", os.path.join(ROOT, "include"), "-I", CUDA_INCLUDE, str(src), "-o", str(exe)], check=True)
    c_side = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    py_side = []
    for c_name, struct in STRUCTS.items():
        py_side.append(f"{c_name} size {ctypes.sizeof(struct)}")
        py_side += [f"{c_name} {field} {getattr(struct, field).offset}" for field, _ in struct._fields_]
    assert c_side[:-1] == py_side

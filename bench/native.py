"""Build and load bench/native_floor.c, the writer thread in C that measures CPython's floor.

The module is compiled into the benchmark's own work directory with the interpreter's
compiler and headers, so nothing is installed and the product never depends on it. When
no compiler or header is there, `load` says why and the benchmark reports the rows as
skipped rather than failing.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sysconfig
from types import ModuleType

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native_floor.c")


def load(build_dir: str) -> tuple[ModuleType | None, str]:
    """(the compiled module, "") or (None, why it could not be built)."""
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return None, f"no Python.h in {include}"
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    target = os.path.join(build_dir, "native_floor" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [*cc, "-O2", "-shared", "-fPIC", f"-I{include}", SOURCE, "-o", target, "-lpthread"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except OSError as exc:
        return None, f"no C compiler ({cc[0]}: {exc.strerror})"
    if proc.returncode != 0:
        return None, f"{cc[0]} failed: {proc.stderr.strip()[-300:]}"
    loader = importlib.machinery.ExtensionFileLoader("native_floor", target)
    spec = importlib.util.spec_from_file_location("native_floor", target, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module, ""

"""Lazy re-exports for a package's `__init__`: the public names of `calib` and `builders` live in
modules that import torch or ModelOpt, and `trtspec --help` must not pay for them (PEP 562)."""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, str]):
    """A module `__getattr__` that imports `package.<exports[name]>` when `name` is first read."""

    def __getattr__(name: str):
        if name in exports:
            return getattr(importlib.import_module(f".{exports[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__

"""Run the real `trtspec` entry point in-process and capture its exit code and output."""

from __future__ import annotations

import sys

import pytest

from trtspec.cli import main


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    argv = sys.argv
    sys.argv = ["trtspec", *map(str, args)]
    try:
        with pytest.raises(SystemExit) as exit_info:
            main()
            sys.exit(0)
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return exit_info.value.code or 0, out.out, out.err

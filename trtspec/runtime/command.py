"""The runtime's flags on the command line: where the PyTorch runtime computes (RuntimeDevice's
fields: --device, --dtype, --compile-layers, --fp8-gemm), declared once for every command that runs
it (generate, profile, measure-cost), with the model's defaults and help.

A Typer module like the stages' command modules (only the command line imports it). Each is a Typer
parameter default, shared by the commands (Typer copies it per command):

    def generate(..., device: str = DEVICE, dtype: Optional[str] = DTYPE, ...):
"""

from __future__ import annotations

import typer

from ..options import default, doc
from .options import RuntimeDevice as R

DEVICE = typer.Option(default(R, "device"), "--device", help=doc(R, "device"))
DTYPE = typer.Option(default(R, "dtype"), "--dtype", help=doc(R, "dtype"))
COMPILE_LAYERS = typer.Option(default(R, "compile_layers"), help=doc(R, "compile_layers"))
FP8_GEMM = typer.Option(default(R, "fp8_gemm"), "--fp8-gemm", help=doc(R, "fp8_gemm"))

"""The options of the quantization quality report (trtspec.quality.report): one model per command.

`QualityReportOptions` is the report `trtspec quantize` writes after quantizing (its `--report-*`
flags; the recipe's `quantization.report`): kept small, since it re-runs both models on the CPU.
`QuantReportOptions` is the standalone `trtspec quant-report` on two existing checkpoints.
Light: pydantic only.
"""

from __future__ import annotations


from typing import Union

from pydantic import Field

from ..calib.options import QuantizeOptions
from ..options import StageOptions


class QualityReportOptions(StageOptions):
    """The report written into OUT/quant_report after quantizing (vs the unquantized model)."""
    section = "quantization.report"
    workloads: dict[str, str] = Field(default_factory=lambda: {"chat": "mt-bench"},
                                      description="Workloads of the report (held-out prompts: calibration ids "
                                                  "excluded).")
    samples: int = Field(4, ge=1, description="Report prompts per workload (kept small: the report re-runs both "
                                              "models on the CPU).")
    max_new_tokens: int = Field(32, ge=1, description="Reference continuation length per report prompt.")
    max_k: int = Field(4, ge=1, description="Acceptance length is reported for K = 1..max_k.")


class QuantReportOptions(StageOptions):
    """`trtspec quant-report`: a quantized checkpoint against an unquantized reference."""
    section = "quant_report"
    workloads: dict[str, str] = Field(default_factory=lambda: {"chat": "mt-bench", "code": "humaneval"},
                                      description="Workloads (trtspec.workloads).")
    samples: int = Field(8, ge=1, description="Held-out prompts per workload.")
    max_new_tokens: int = Field(64, ge=1, description="Reference continuation length per prompt.")
    max_k: int = Field(4, ge=1, description="Acceptance length is reported for K = 1..max_k.")
    seed: int = Field(0, description="Seed of the prompt sampling.")


class QuantizeStage(QuantizeOptions):
    """The quantize stage as a whole: the quantization, then (by default) its quality report.
    This is the recipe's `quantization:` section and the `trtspec quantize` flags."""
    report: Union[QualityReportOptions, bool] = Field(True, description="Write a quality report (vs the "
                                                      "unquantized model) into OUT/quant_report.")

    def report_options(self) -> QualityReportOptions | None:
        if self.report is False:
            return None
        return self.report if isinstance(self.report, QualityReportOptions) else QualityReportOptions()

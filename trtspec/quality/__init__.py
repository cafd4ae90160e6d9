"""Quality of a quantized checkpoint against its unquantized reference (`trtspec quant-report`, and
the report `trtspec quantize` / the recipe's quantize stage write after quantizing).

It sits above calib and tuning (it quantizes nothing; it runs both checkpoints in the runtime and the
acceptance profiler), so calib does not import tuning.

    options.py   QualityReportOptions (after quantize), QuantReportOptions (quant-report)
    samples.py   held-out prompt selection, the checkpoint's calibration / mixed-precision records
    metrics.py   logit RMSE, top-1 agreement, perplexity, acceptance of a pair
    report.py    quality_report, report_after_quantize, write_report
    render.py    quality_report.png and the rich table
    command.py   `trtspec quant-report`
    quantize_command.py  `trtspec quantize`: calib's quantization, then the report
"""

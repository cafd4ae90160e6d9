"""The one 95% quantile behind every interval and "distinguishable" test in trtspec.

The tuner (tuning/select.py: is one setting's predicted tokens/s clear of another's, or of off?)
and perf (perf/stats.py: t and bootstrap intervals, the ± printed under a predicted AL) both speak
of "95%"; one constant keeps the tuner's "not distinguishable" and perf's intervals meaning the
same thing. It lives at the bottom of the layers (no imports) so both may read it, as they read
`pm_text`, the ± both print after a number ("±?" where its standard error is unknown).

Every "±" trtspec prints is that 95% half-width, 1.96 standard errors (PM_MEANS says so where a
reader meets one), never one standard error: the same ± meaning two things made the tuner's AL look
twice as certain as perf's for the same number. Files keep standard errors (`*_se` fields).
"""

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile (two-sided 95%): scipy.stats.norm.ppf(0.975)

UNKNOWN_PM = " ±?"  # after a number whose standard error is unknown (pm_text)
PM_MEANS = "±: 95% (1.96 standard errors)"  # said once where a reader meets a ± (table captions, legends)


def pm_text(se: float | None, exact: bool = False) -> str:
    """' ±0.26' (the 95% half-width: Z95 standard errors) to print after a number; '' after an exact
    one (`exact`: the AL 1 of no speculation); ' ±?' where the standard error is unknown (None: one
    profiled prompt has no spread to measure, or a file from before they were recorded). Unknown is
    not zero, and a measured SE of 0 (prompts that happened to agree) is ' ±0.00', not exact:
    printing nothing there would make the least evidence look like an exact value."""
    if exact:
        return ""
    return UNKNOWN_PM if se is None else f" ±{Z95 * se:.2f}"


def interval_text(ci, spec: str, scale: float = 1.0, suffix: str = "") -> str:
    """'[0.85, 1.47]' (an Interval's low and high, each times `scale`, formatted by `spec` and followed
    by `suffix`), or '±?' where there is none (one request: nothing to resample). The one rule for a
    measured value's interval in text, the terminal's and report.html's alike."""
    if ci is None:
        return UNKNOWN_PM.strip()
    return f"[{ci.low * scale:{spec}}{suffix}, {ci.high * scale:{spec}}{suffix}]"

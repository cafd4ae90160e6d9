"""The one 95% quantile behind every interval and "distinguishable" test in trtspec.

The tuner (tuning/select.py: is one setting's predicted tokens/s clear of another's, or of off?)
and perf (perf/stats.py: t and bootstrap intervals, the ± printed under a predicted AL) both speak
of "95%"; one constant keeps the tuner's "not distinguishable" and perf's intervals meaning the
same thing. It lives at the bottom of the layers (no imports) so both may read it.
"""

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile (two-sided 95%): scipy.stats.norm.ppf(0.975)

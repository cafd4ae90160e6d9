#!/usr/bin/env python
"""AL against temperature per workload, from profiles taken at several temperatures.

    for t in 0 0.4 0.7 1.0; do
        trtspec profile --ckpt PAIR --workloads chat=mt-bench,code=humaneval --temperature $t \
            --samples-per-prompt 2 --out profile.T$t.json
    done
    .venv/bin/python scripts/al_vs_temperature.py profile.T*.json --out al_vs_temperature.png [--k 4]

Prints AL(K) ± its 95% half-width (1.96 standard errors) per workload and temperature (trtspec.tuning.report
.al_by_temperature) and writes the plot (plot_al_vs_temperature: 95% error bars). K defaults to
each profile's max_k.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trtspec.confidence import PM_MEANS, pm_text
from trtspec.tuning.report import al_by_temperature, plot_al_vs_temperature
from trtspec.tuning.schema import load_profile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+", type=Path, help="profile.json files (one per temperature)")
    ap.add_argument("--out", type=Path, default=Path("al_vs_temperature.png"), help="PNG to write")
    ap.add_argument("--k", type=int, default=None, help="draft length whose AL is shown (default: max_k)")
    args = ap.parse_args()
    profiles = [load_profile(p) for p in args.profiles]
    print(f"AL({args.k or 'max K'}) by temperature, {PM_MEANS} over the profiled prompts")
    for name, points in al_by_temperature(profiles, args.k).items():
        print(f"{name}: " + ", ".join(f"T={t:g} {al:.3f}" + pm_text(se)
                                      for t, al, se in points))
    print(f"wrote {plot_al_vs_temperature(profiles, args.out, args.k)}")


if __name__ == "__main__":
    main()

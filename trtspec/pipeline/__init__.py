"""`trtspec run RECIPE.yaml`: the whole pipeline from one recipe (trtspec/recipe.py), stage by stage.

    state.py    OUT/run-manifest.json, input hashes and output fingerprints (run or skip)
    stages.py   one small function per stage over the stage's Python API, and where it writes
    runner.py   decisions (run / skip / n/a), --until / --force / --dry-run
    summary.py  the summary tables: stages, and the measured vs predicted speedup
    command.py  the Typer command
    signals.py  SIGTERM taking Ctrl-C's path, so a killed run stops its server
"""

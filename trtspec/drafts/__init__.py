"""Training drafts for a target: `trtspec train-draft` (an EAGLE-3 head, with ModelOpt).

    options.py   TrainDraftOptions: the recipe section `draft: {train: ...}`, the API's argument, the flags
    data.py      the target's greedy answers to workload prompts (cached), the held-out split
    head.py      ModelOpt's EAGLE-3 model sized for the target, its d2t draft vocabulary, export and load
    heldout.py   held-out AL(K): the drafter chain teacher-forced, replayed by tuning.acceptance
    train.py     the resumable, seeded loop and the atomic output
    report.py    learning_curve.png, the progress bar's status, the held-out AL ± text printed
    command.py   the Typer command
"""

"""Tuning: acceptance profiles -> per-workload draft length / EAGLE tree per concurrency band.

    profile.py     measure once per workload (match lengths / rank paths per generated position)
    profile_pass.py  its teacher-forced pass, batch_size finished sequences per forward
    sampled.py     profiles at temperature > 0: the sampled output, the accept rules, the estimator
    acceptance.py  exact replay of step boundaries: AL and per-position rates of any K or tree, SEs
    cost.py        analytic step-time model (H100/H200 roofline from checkpoint sizes + quantization)
    fit.py         measured cost tables and least-squares fitting of the model's free numbers
    measure.py     time the PyTorch runtime into a cost table
    trees.py       EAGLE tree growth under TRT-LLM's eagle_choices rules
    grouping.py    k-medoids grouping of workloads into at most N served profiles
    select.py      maximise predicted tokens/s per workload x band
    schema.py      profile.json (pydantic) and dump_json
    tuning_schema.py  tuning.json (pydantic): what tune writes and triton_repo / perf read
    report.py      plots (per workload; AL vs temperature) and the summary table
    options.py     ProfileOptions, TuneOptions, MeasureConfig (recipe sections, CLI defaults)
    tune.py        the tune stage as a library call (tune_stage, run_tune)
    command.py     `trtspec tune`, `trtspec measure-cost`; profile_command.py `trtspec profile`
"""

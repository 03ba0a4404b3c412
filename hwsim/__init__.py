"""hwsim: a discrete-event simulator of sparse-MoE LLM decode on accelerators.

The one path through the code: a YAML scenario is loaded and validated into a frozen
`Scenario`; `build` elaborates it into a wired `System` (chip resources) and a `Workload`
(the model's kernels per step); SimPy runs it; `run_scenario` returns a pure-data
`RunResult`. Writers, plots and the CLI consume that result and never feed back.
"""

__version__ = "0.1.0"

"""Bring your own stack: a torch.profiler (Kineto) trace of any engine becomes the schedule,
timed on any chip (docs/traces.md).

reader (stream the trace) -> timeline (the host's calls and the kernels they launch, each
classified into a typed work item of hwsim/model/ir.py: classify) -> schedule (retarget the items to the pass's
point, lower them to the engine's kernels, with the host's work between them)."""

# The package imports nothing: loading it must not load the trace reader. Its typed work items
# are the vocabulary of every schedule, so they live below it, in hwsim/model/ir.py.
# A scenario's trace becomes its schedule in from_scenario.py.

"""Bring your own stack: a torch.profiler (Kineto) trace of any engine becomes the schedule,
timed on any chip (docs/traces.md).

reader (stream the trace) -> timeline (the host's calls and the kernels they launch, each
classified into a typed work item: classify, ir) -> schedule (retarget the items to the pass's
point, lower them to the engine's kernels, with the host's work between them)."""

# The package imports nothing: its typed work items (ir.py) are the vocabulary of every schedule
# (hwsim/parallel builds Collective items), so loading them must not load the trace reader.
# A scenario's trace becomes its schedule in from_scenario.py.

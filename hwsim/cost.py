"""What a run will cost in wall time and memory, estimated before it starts, and a refusal
(exit 2, with the numbers and the option that raises the limit) when that is hours or many GB.

The estimate is deliberately coarse and errs high. It counts kernels per simulated pass
(fixed kernels per layer plus a few per active expert) and sequences per pass, and prices
them with per-kernel and per-sequence wall costs measured on the development machine
(docs/performance.md: a batch-1 Mixtral step is about 10 ms at kernel fidelity, 0.3 s at tile
fidelity; routing and dispatch cost about 13 us per sequence and layer at batch 8k-64k, tile
fidelity about 1 ms at batch 512).
A serving run simulates each distinct iteration shape once and reuses it (hwsim/serving/loop.py):
priced first by a bound on its shapes (each a pass at its full batch: decode-only shapes by
batch size and context bucket, one per prompt chunk; never more than its iterations, doubled),
and if that is over two minutes, by rehearsing its scheduling
(hwsim/serving/rehearse.py) to count the shapes. voice-agent: 26 shapes simulated in about
1.1 s; priced as 64 passes, 2.1 s (it was priced as all 215 iterations, 44 s).
A run on several GPUs simulates each GPU's kernels (hwsim/parallel/multi.py): its passes cost
the sum of the GPUs' (DeepSeek-V3 EP, 4 steps: 1.8 s estimated, 1.1 s run on 8 GPUs; 14 s and
6.9 s on 64).
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass

from hwsim.config.scenario import ClosedArrivals, TraceArrivals, TraceRouting
from hwsim.engine.timer import Fidelity
from hwsim.errors import ConfigError
from hwsim.model.blocks import moe_schedule as moe_block

DEFAULT_MAX_WALL_S = 1800.0      # 30 minutes
DEFAULT_MAX_GB = 8.0

# wall seconds per kernel, and per sequence (token) and layer, of one simulated pass, by fidelity
S_PER_KERNEL = {Fidelity.KERNEL: 1.5e-5, Fidelity.WAVE: 1e-4, Fidelity.TILE: 3e-4}
S_PER_TOKEN_LAYER = {Fidelity.KERNEL: 1.5e-5, Fidelity.WAVE: 3e-5, Fidelity.TILE: 1e-3}
S_PER_TOKEN_LAYER_GROUPED = 5e-6        # grouped/fused MoE: mostly the routing draw
ONE_KERNEL_PER_LAYER = 40.0              # grouped/fused MoE: a layer's kernels, whatever its experts
S_PER_TILE_TOKEN_CONTEXT = 2e-7          # tile fidelity: attention tiles grow with the context
BYTES_PER_RECORD = 600                   # one kept kernel record (runtime.kernel_records)
BYTES_PER_TOKEN_LAYER = 64               # routing and dispatch arrays per sequence and layer
BYTES_PER_REQUEST = 2048                 # serving: a request's row, its token times
BYTES_PER_ITERATION = 6000               # serving: an iteration's record, its timeline polygons
                                         # (voice-agent: 399 MB peak at 2,000 requests, 702 MB at 10,000)
S_PER_ITERATION = 5e-5                   # serving: the loop's own work per iteration (reused shape)
REHEARSE_ABOVE_S = 120.0                 # serving: priced pass by pass above this, rehearse it
                                         # (the rehearsal itself takes about a second)
BYTES_PER_USER = 8000                    # closed loop: a user's process and three random streams
                                         # (4 KB measured by tracemalloc, doubled)
S_PER_USER = 5e-5                        # closed loop: starting a user's process and streams
BYTES_PER_ROUTING_BYTE = 20              # a routing trace held as lists of ids: ~20x its CSV text
BASE_BYTES = 300e6                       # the interpreter, numpy, pandas, matplotlib
S_PER_CTA = 7.5e-8                       # a kernel trace: the engine times a reduction or an Inductor
                                         # kernel on its traced grid, ~75 ns of wall a CTA
                                         # (hwsim/ktrace/reader.py, MAX_CTAS)


@dataclass
class Cost:
    wall_s: float
    memory_gb: float
    passes: float
    kernels_per_pass: float
    iterations: float | None = None      # serving, rehearsed: iterations the passes are reused over
    ctas_per_pass: float | None = None   # a kernel trace: its kernels' CTAs, all together

    def describe(self) -> str:
        reused = f", reused over {self.iterations:.3g} iterations" if self.iterations else ""
        ctas = f" launching {self.ctas_per_pass:.3g} CTAs" if self.ctas_per_pass else ""
        return (f"about {_duration(self.wall_s)} and {self.memory_gb:.1f} GB "
                f"({self.passes:.3g} simulated passes of about {self.kernels_per_pass:.3g} kernels{ctas}{reused})")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 86400:.3g} days"


def _kernels(model, tokens: int, moe_schedule: str = "per-expert", held: float | None = None) -> float:
    """Kernels of one pass: about 15 per layer plus 8 per active expert of a MoE layer (the
    expected number of distinct experts that tokens x top_k uniform picks reach, of the `held`
    experts this GPU runs: all of them on one GPU). A grouped or fused MoE runs one kernel a
    projection whatever the experts it covers, so its stream's length does not grow with
    them: ONE_KERNEL_PER_LAYER kernels a layer (Qwen3-30B-A3B grouped: 40 a layer at batch 1 to
    256, 27-80 ms a pass run, 29 ms priced; DeepSeek-V3 fused: 43)."""
    if model.moe is None:
        return model.layers * 15.0
    if moe_block(moe_schedule).one_kernel:
        return model.layers * ONE_KERNEL_PER_LAYER
    experts, k = model.moe.experts, model.moe.top_k
    held = experts if held is None else held
    reached = -math.expm1(min(tokens, 1e9) * math.log1p(-min(k / experts, 1 - 1e-12)))
    active = min(held, max(k * held / experts, held * reached)) + model.moe.shared_experts
    return model.layers * (15.0 + 8.0 * active)


def _pass_s(fidelity: Fidelity, kernels: float, tokens: int, context: int, layers: int,
            moe_schedule: str = "per-expert") -> float:
    per_token = S_PER_TOKEN_LAYER[fidelity]
    if moe_block(moe_schedule).one_kernel and fidelity is Fidelity.KERNEL:
        per_token = S_PER_TOKEN_LAYER_GROUPED      # no per-expert gather and scatter to build
    s = kernels * S_PER_KERNEL[fidelity] + tokens * layers * per_token
    if fidelity is Fidelity.TILE:
        s += tokens * context * S_PER_TILE_TOKEN_CONTEXT
    return s


def estimate(cfg, model, build=None) -> Cost:
    """The cost of simulating scenario `cfg` (a Scenario) of model shape `model`; `build` makes
    the system a large serving run's rehearsal runs on (hwsim/pipeline.py cost gives its own)."""
    w, fidelity = cfg.workload, Fidelity(cfg.runtime.fidelity)
    extra_bytes = _routing_trace_bytes(cfg)
    if w.serving:
        requests = w.arrivals.requests
        # closed loop: only the users that get a request are started (hwsim.serving.loop)
        users = min(w.arrivals.users, requests) if isinstance(w.arrivals, ClosedArrivals) else 0
        out_tokens, prompt = w.output.mean(), w.prompt.mean()
        batch = max(1, min(w.max_batch_size, requests, users or requests))
        iterations = 2 * (requests * out_tokens / batch + requests * prompt / w.token_budget)
        shapes = min(iterations, _shapes(w, batch, requests))
        kernels = _kernels(model, batch, cfg.runtime.moe_schedule)
        wall = (shapes * _pass_s(fidelity, kernels, batch, int(prompt + out_tokens), model.layers,
                                 cfg.runtime.moe_schedule)
                + iterations * S_PER_ITERATION + users * S_PER_USER)
        memory = (requests * (BYTES_PER_REQUEST + 8 * out_tokens) + iterations * BYTES_PER_ITERATION
                  + users * BYTES_PER_USER + extra_bytes)
        if wall > REHEARSE_ABOVE_S:
            cost = _serving_rehearsed(cfg, model, build)
            return Cost(cost.wall_s + users * S_PER_USER,
                        cost.memory_gb + (users * BYTES_PER_USER + extra_bytes) / 1e9,
                        cost.passes, cost.kernels_per_pass, cost.iterations)
        return Cost(wall, (BASE_BYTES + memory) / 1e9, shapes, kernels, iterations)
    passes = w.decode_steps + (1 if w.prompt_tokens else 0)
    gpus = _Gpus(cfg.parallel, model)
    kernels = gpus.kernels(model, w.batch_size, cfg.runtime.moe_schedule)
    wall = w.decode_steps * gpus.pass_s(fidelity, model, w.batch_size, w.context_tokens + w.decode_steps,
                                       cfg.runtime.moe_schedule, cfg.parallel.micro_batches)
    traced = TracePrice.of(w.kernel_trace.path) if w.kernel_trace is not None else None
    if traced is not None:              # the trace is the schedule: priced by its kernels and grids
        kernels = traced.kernels
        wall = w.decode_steps * (traced.pass_s(fidelity) + w.batch_size * model.layers * S_PER_TOKEN_LAYER[fidelity])
        extra_bytes += traced.read_bytes
    if w.prompt_tokens:
        wall += gpus.pass_s(fidelity, model, w.prompt_tokens, w.prompt_tokens, cfg.runtime.moe_schedule)
    kept = passes if cfg.runtime.kernel_records < 0 else min(passes, cfg.runtime.kernel_records)
    memory = (kept * kernels * BYTES_PER_RECORD
              + max(w.batch_size, w.prompt_tokens) * model.layers * BYTES_PER_TOKEN_LAYER * 4
              + passes * 2048      # one step result each
              + extra_bytes)
    if gpus.n > 1:
        # a pass holds every GPU's kernel lists at once (hwsim/parallel/multi.py, its segments);
        # records are kept of GPU 0's only (counted above). DeepSeek-V3 EP: 1.7 MB a GPU measured.
        memory += gpus.n * kernels * BYTES_PER_RECORD
    return Cost(wall, (BASE_BYTES + memory) / 1e9, passes, kernels * gpus.n,
                ctas_per_pass=traced.ctas if traced else None)


@dataclass
class TracePrice:
    """A kernel trace's price, from the reader's bounded pass (hwsim/ktrace/reader.py: it refuses
    a trace past its bounds, so pricing one costs at most that read): its device events and
    their CTAs, each simulated every pass."""
    kernels: int
    ctas: int

    @classmethod
    def of(cls, path: str) -> "TracePrice":
        from pathlib import Path

        from hwsim.ktrace.reader import read_trace

        trace = read_trace(Path(path))
        return cls(sum(len(events) for events in trace.device.values()), trace.ctas)

    def pass_s(self, fidelity: Fidelity) -> float:
        return self.kernels * S_PER_KERNEL[fidelity] + self.ctas * S_PER_CTA

    @property
    def read_bytes(self) -> float:       # the trace's records, kept through the run
        return self.kernels * BYTES_PER_RECORD


def _shapes(w, batch: int, requests: int) -> float:
    """Distinct iteration shapes a serving run can simulate (hwsim/serving/loop.py shape_key;
    the loop simulates each once): decode-only ones, one per batch size and context bucket,
    and at most one per iteration that computes prompt tokens, of which a request's prompt
    needs one per chunk of the budget a full batch of decodes leaves (and one for its end)."""
    from hwsim.serving.loop import CONTEXT_BUCKET, PREFILL_BUCKET

    longest = w.prompt.longest() + w.output.longest()
    decode_only = batch * max(1, math.ceil(longest / CONTEXT_BUCKET))
    chunk = max(PREFILL_BUCKET, w.token_budget - batch)
    return decode_only + requests * (w.prompt.mean() / chunk + 1)


class _Gpus:
    """What each simulated GPU of a fixed-batch run computes (hwsim/parallel/layout.py): every
    GPU builds and runs its own kernel list each pass, of its shard of the model (all of its
    layers), for its attention group's tokens and with its EP group's experts
    (hwsim/parallel/multi.py _micro_batch), so a pass costs the sum of the GPUs' passes."""

    def __init__(self, p, model):
        self.n = p.gpus
        tp = 1 if p.dp_attention else p.tp
        self.groups = max(1, p.gpus // tp)           # attention groups: their own tokens
        self.held = model.moe.experts / p.ep if model.moe else None

    def kernels(self, model, tokens: int, moe_schedule: str) -> float:
        """One GPU's kernels of a pass of `tokens` (every token's picks reach its experts)."""
        if self.n == 1:
            return _kernels(model, tokens, moe_schedule)
        return _kernels(model, tokens, moe_schedule, self.held)

    def pass_s(self, fidelity: Fidelity, model, tokens: int, context: int, moe_schedule: str,
               micro_batches: int = 1) -> float:
        if self.n == 1:
            return _pass_s(fidelity, _kernels(model, tokens, moe_schedule), tokens, context, model.layers,
                           moe_schedule)
        # each GPU: its kernels once per micro-batch; the routing of every token of the pass
        # (per_gpu_choice keeps all tokens' picks, those of other GPUs' experts set to -1)
        one = _pass_s(fidelity, micro_batches * self.kernels(model, tokens, moe_schedule), tokens,
                      0, model.layers, moe_schedule)
        if fidelity is Fidelity.TILE:       # attention tiles: each GPU's own sequences
            one += tokens / self.groups * context * S_PER_TILE_TOKEN_CONTEXT
        return self.n * one


def _routing_trace_bytes(cfg) -> float:
    """What holding the scenario's routing trace costs (hwsim.workload.router.load_trace)."""
    routing = cfg.moe.routing
    if not isinstance(routing, TraceRouting) or not routing.trace:
        return 0.0
    try:
        return os.stat(routing.trace).st_size * BYTES_PER_ROUTING_BYTE
    except OSError:
        return 0.0                    # reported when it is read


def _serving_rehearsed(cfg, model, build) -> Cost:
    """Distinct shapes and iterations counted on a rehearsal of the first requests, extrapolated
    to all of them (voice-agent, 10,000 requests: about 400 shapes estimated, 216 simulated);
    each shape priced as its own pass."""
    from hwsim.serving.rehearse import rehearse

    if build is None:
        raise ValueError("a serving run this large is priced by rehearsing it on a built system: "
                         "pass build= (hwsim/pipeline.py cost does)")
    r = rehearse(cfg, build)
    requests = cfg.workload.arrivals.requests
    if isinstance(cfg.workload.arrivals, TraceArrivals) and r.requests < min(requests, r.limit):
        requests = r.requests                  # the trace's window holds no more
    scale = requests / max(r.requests, 1)
    iterations = r.iterations * scale
    # shapes seen grow as a power of the requests (the shape space fills up), fitted on the
    # rehearsal's halves with an exponent of at least 0.5 (a short rehearsal sees few)
    seen, first_half = len(r.shapes), len(r.shapes) - r.new_shapes_half
    alpha = min(1.0, max(0.5, math.log2(seen / first_half) if first_half > 0 else 1.0))
    shapes = min(seen * (requests / max(r.requests, 1)) ** alpha, max(iterations, seen))
    fidelity, layers = Fidelity(cfg.runtime.fidelity), model.layers
    costs, kernels = [], []
    for decodes, ctx, pre, _ in r.shapes:
        tokens = max(1, decodes + pre)
        kernels.append(_kernels(model, tokens, cfg.runtime.moe_schedule))
        costs.append(_pass_s(fidelity, kernels[-1], tokens, ctx + pre, layers, cfg.runtime.moe_schedule))
    n = max(len(costs), 1)
    wall = shapes * sum(costs) / n + iterations * S_PER_ITERATION
    memory = requests * BYTES_PER_REQUEST + r.tokens * scale * 8 + iterations * BYTES_PER_ITERATION
    return Cost(wall, (BASE_BYTES + memory) / 1e9, shapes, sum(kernels) / n, iterations)


def limits_from_env() -> tuple[float, float]:
    """(max wall s, max GB): HWSIM_MAX_WALL_S and HWSIM_MAX_GB, else the defaults."""
    def env(name: str, default: float) -> float:
        raw = os.environ.get(name)
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"expected a number of seconds or GB, got {raw!r}", key=name) from None
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"expected a positive number, got {raw!r}", key=name)
        return value
    return env("HWSIM_MAX_WALL_S", DEFAULT_MAX_WALL_S), env("HWSIM_MAX_GB", DEFAULT_MAX_GB)


def check_cost(cfg, model, max_wall_s: float | None = None, max_gb: float | None = None,
               source: str | None = None, build=None) -> Cost:
    """Refuse (ConfigError, exit 2) a run estimated above the limits; returns the estimate
    (`build`: estimate's)."""
    env_wall, env_gb = limits_from_env()
    max_wall_s = env_wall if max_wall_s is None else max_wall_s
    max_gb = env_gb if max_gb is None else max_gb
    cost = estimate(cfg, model, build)
    key = _biggest_key(cfg)
    if cost.wall_s > max_wall_s:
        raise ConfigError(f"this run is estimated to take {cost.describe()}, over the limit of "
                          f"{_duration(max_wall_s)}; make it smaller, or raise the limit with "
                          f"--max-wall-s (or HWSIM_MAX_WALL_S)", file=source, key=key)
    if cost.memory_gb > max_gb:
        raise ConfigError(f"this run is estimated to need {cost.describe()}, over the limit of {max_gb:g} GB; "
                          f"make it smaller, or raise the limit with --max-gb (or HWSIM_MAX_GB)",
                          file=source, key=key)
    return cost


def _biggest_key(cfg) -> str:
    """The workload key that most likely makes the run large (named in the message)."""
    w = cfg.workload
    if w.serving:
        return "workload.arrivals.requests"
    if w.kernel_trace is not None:      # its kernels and grids are the run's size
        return "workload.kernel_trace.path"
    sizes = {"workload.decode_steps": w.decode_steps, "workload.batch_size": w.batch_size * 20,
             "workload.prompt_tokens": w.prompt_tokens}
    return max(sizes, key=sizes.get)


def cap_memory(max_gb: float | None) -> None:
    """Back the estimate with a hard cap: this process (and what it forks) may map at most
    `max_gb` (default HWSIM_MAX_GB, else DEFAULT_MAX_GB) of data, so a run that the estimate got
    wrong ends in a MemoryError, reported as one line and exit 2 (hwsim.cli), rather than in
    the kernel's OOM killer or a machine swapping to a halt. RLIMIT_DATA counts the heap and
    private anonymous mappings (Linux 4.7+), not shared libraries or reserved address space."""
    import resource

    limit = int((max_gb if max_gb is not None else limits_from_env()[1]) * 1e9)
    # never below what is mapped already (the estimate refuses such a limit; a cap under it
    # would fail every allocation, even the error's own)
    limit = max(limit, _data_bytes() + CAP_HEADROOM_BYTES)
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or limit < soft:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


CAP_HEADROOM_BYTES = 128 * 2**20


def _data_bytes() -> int:
    """This process's data mappings now (VmData), 0 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


OUT_OF_MEMORY = ("out of memory: the run needed more than its memory limit (--max-gb, HWSIM_MAX_GB, "
                 "default 8 GB) allows; make it smaller or raise the limit")


@contextmanager
def memory_capped(max_gb: float | None):
    """cap_memory for the duration of a block (one sweep point), the process's own limit put
    back after it, so a long-lived process (a Dask worker) runs each point under the cap and
    nothing else under it. None: no cap."""
    import resource

    if max_gb is None:
        yield
        return
    before = resource.getrlimit(resource.RLIMIT_DATA)
    cap_memory(max_gb)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, before)


def uncap_memory() -> None:
    """Lift cap_memory's limit (to report a MemoryError, and exit, with room to do so)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))

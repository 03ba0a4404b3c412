"""Thread blocks one SM holds at once (CUDA occupancy), from a kernel's compiled resources.

A block is resident only while the SM has room for all of its warps, registers and shared
memory; the fewest of the four limits is what the SM holds (the CUDA Occupancy Calculator's
model). The per-SM totals come from the profile (register file, shared memory, threads as
the engine's default occupancy counts them); the granularities and caps are those of compute
capability 8.0-10.0, the same on every chip hwsim profiles:
- at most MAX_BLOCKS_PER_SM blocks and MAX_WARPS_PER_SM warps per SM, registers at most 255 a
  thread (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability", 9.0);
- a warp's registers are allocated in units of REG_ALLOC_UNIT (CUDA Occupancy Calculator,
  docs.nvidia.com/cuda/cuda-occupancy-calculator, "register allocation unit size" 256, warp
  granularity, for cc 8.x-9.0);
- the runtime reserves SMEM_RESERVED_PER_BLOCK of shared memory per block (Programming Guide,
  cc 8.x-9.0: "1 KB of shared memory is reserved for system use" per block).
"""

from __future__ import annotations

import math

MAX_BLOCKS_PER_SM = 32
MAX_WARPS_PER_SM = 64
WARP = 32
REG_ALLOC_UNIT = 256
SMEM_RESERVED_PER_BLOCK = 1024


def resident_blocks(regs_per_sm: int, smem_per_sm: int, threads: int, regs_per_thread: int,
                    smem_bytes: int) -> int:
    """Blocks of `threads` threads, `regs_per_thread` registers each and `smem_bytes` of
    shared memory an SM holds at once (at least 1: a kernel that launches runs one)."""
    warps = math.ceil(threads / WARP)
    by_warps = MAX_WARPS_PER_SM // warps
    regs_per_warp = math.ceil(regs_per_thread * WARP / REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    by_regs = (regs_per_sm // regs_per_warp) // warps if regs_per_thread else MAX_BLOCKS_PER_SM
    by_smem = smem_per_sm // (smem_bytes + SMEM_RESERVED_PER_BLOCK) if smem_bytes else MAX_BLOCKS_PER_SM
    return max(1, min(MAX_BLOCKS_PER_SM, by_warps, by_regs, by_smem))

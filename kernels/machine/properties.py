"""The machine chapter's device table: each property of ``device.properties()`` in words, in a unit a
reader reads at a glance (MiB, KiB, GiB rather than bytes)."""

from __future__ import annotations

# key -> (what it is, unit, divisor from the stored value to that unit)
PROPERTIES = {
    "cc": ("compute capability", "", None),
    "sms": ("streaming multiprocessors (SMs)", "", 1),
    "max_sm_clock_mhz": ("SM clock, the most the driver allows", "MHz", 1),
    "mem_clock_mhz": ("memory clock", "MHz", 1),
    "bus_width_bits": ("memory bus width", "bits", 1),
    "l2_bytes": ("L2 cache", "MiB", 2**20),
    "smem_per_sm_bytes": ("shared memory per SM", "KiB", 2**10),
    "smem_per_block_optin_bytes": ("shared memory per block, at most (opt-in)", "KiB", 2**10),
    "regs_per_sm": ("32-bit registers per SM", "", 1),
    "max_threads_per_sm": ("resident threads per SM, at most", "", 1),
    "warp_size": ("threads per warp", "", 1),
    "global_mem_bytes": ("global memory (DRAM)", "GiB", 2**30),
}


def table_rows(values: dict) -> list[dict]:
    """A row (property, value, unit) per entry of ``values`` ({key of PROPERTIES: stored value}), in the
    order of PROPERTIES; the compute capability as major.minor. A key without words is refused."""
    unknown = sorted(set(values) - set(PROPERTIES))
    if unknown:
        raise KeyError(f"values: no words for the device properties {unknown}; add them to PROPERTIES")
    rows = []
    for key, (words, unit, divisor) in PROPERTIES.items():
        if key not in values:
            continue
        v = float(values[key])
        if divisor is None:  # the compute capability, stored as "90"
            shown = f"{int(v) // 10}.{int(v) % 10}"
        else:
            v /= divisor
            shown = f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"
        rows.append({"property": words, "value": shown, "unit": unit or "--"})
    return rows

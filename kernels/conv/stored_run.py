"""The chapter's run read back: the rates, latencies, times and ncu counts that notebooks/03_conv.ipynb
measured (or the reference GPU stored), and the model's prediction of every timed launch from them.

The chapter measures on a GPU and reads these rows without one; its deep-dive pages and exercises
read them in both modes, so that each runs on its own with the numbers of the chapter's last run.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..harness import ceilings, device, perfmodel, quantities, results
from ..harness.glue import glue
from . import common, model, registry, s9_autotune, s11_halo_autotune, stages

PROBLEMS = ("conv1", "conv2")
TOLERANCE = 0.15  # the book's goal for the model: how far a prediction may miss the measured rate
# ncu's kernel names of the stages (Numba's with a module prefix and a mangled suffix), and the stages the
# prose singles out, from the registry
KERNEL_FN = {s.name: s.kernel for s in registry.REGISTRY if s.gpu and not s.runs}
HALO = next(s.name for s in registry.REGISTRY if s.halo)
TUNED = tuple(s.name for s in registry.REGISTRY if s.runs)  # stages whose tile is chosen by timing
TUNERS = {"AUTOTUNE": s9_autotune, "HALO AUTOTUNE": s11_halo_autotune}  # their modules: candidates, label, parse


def gpu_slug() -> str:
    """This GPU's results folder where the chapter has run on it, else the reference GPU's."""
    if device.on_gpu():
        slug = device.environment()["gpu_slug"]
        if results.load("conv", slug):
            return slug
    return results.REFERENCE_GPU


@dataclass
class Run:
    """What one GPU's newest rows of the chapter hold, in the shapes the notebook's cells use."""

    gpu: str
    stored: dict  # results.latest: {(kernel, problem, metric): row}
    measured: dict  # {(stage, problem): GFLOP/s}
    ceil: ceilings.Ceilings
    rates: dict  # warp instructions per second: fp32, ldst, other, ldg
    w: perfmodel.Weights
    lat: perfmodel.Latencies
    props: dict
    tune_all: dict  # {problem: [{BM, BN, BKC, SPLIT, ms, GFLOP/s} of every AUTOTUNE candidate]}
    tuned: dict  # {problem: AUTOTUNE's fastest candidate's tile}
    timed: list  # (stage, problem, tile) of every timed launch
    candidates: dict = field(default_factory=dict)  # {tuner: {problem: [tile + ms, GFLOP/s of every candidate]}}

    def value(self, kernel: str, metric: str, problem: str = "-") -> float:
        return float(self.stored[(kernel, problem, metric)]["value"])

    @property
    def gpu_rates(self) -> dict:
        """model.predict's rate arguments."""
        return dict(fma_gflops=self.ceil.fma_gflops, copy_gbps=self.ceil.copy_gbps, wavefront_rate=self.rates["ldst"])


def load(slug: str | None = None) -> Run:
    """The newest rows of ``slug`` (``gpu_slug()`` by default); the rates as the weights' definition needs them."""
    slug = slug or gpu_slug()
    stored = results.latest("conv", slug)
    if ("ceiling", "-", "fma") not in stored:
        raise LookupError(f"no stored conv rates for {slug}: run notebooks/03_conv.ipynb on that GPU first")

    def ref(kernel, metric, problem="-"):
        return float(stored[(kernel, problem, metric)]["value"])

    # the shared-memory ceiling is not stored, and nothing reads it
    ceil = ceilings.Ceilings(copy_gbps=ref("ceiling", "copy"), fma_gflops=ref("ceiling", "fma"), smem_gbps=float("nan"))
    fp32 = ceil.fma_gflops * 1e9 / 64  # FFMA warp instructions per second
    rates = {
        "fp32": fp32,
        "ldst": fp32 / ref("ceiling", "W_ldst"),
        "other": fp32 / ref("ceiling", "W_other"),
        "ldg": fp32 / ref("ceiling", "W_ldg"),
    }
    lat = perfmodel.Latencies(
        alu=ref("latency", "FFMA"),
        shared=ref("latency", "shared load"),
        global_=ref("latency", "L2 hit"),
        barrier=ref("latency", "barrier"),
        l1=ref("latency", "L1 hit"),
        l2_far=ref("latency", "L2 far hit"),
    )
    measured = {
        (kernel, pname): float(r["value"]) for (kernel, pname, metric), r in stored.items() if metric == "gflops"
    }
    candidates, tuned = {}, {}
    for name, tuner in TUNERS.items():  # each tuner's candidates of its newest run, named by tuner.label
        newest = max((r["date"] for r in stored.values() if r["metric"] == tuner.METRIC), default=None)
        rows = candidates[name] = {}
        for (kernel, pname, metric), r in stored.items():
            if metric == tuner.METRIC and r["date"] == newest:
                ms = float(r["value"])
                rows.setdefault(pname, []).append(
                    {**tuner.parse(kernel), "ms": ms, "GFLOP/s": common.PROBLEMS[pname].flops / ms / 1e6}
                )
        tuned[name] = {p: {k: min(c, key=lambda r: r["ms"])[k] for k in tuner.KEYS} for p, c in rows.items()}
    timed = [
        (name, pname, tuned[name][pname] if name in TUNED else None)
        for (name, pname) in measured
        if name in (*stages.GPU_STAGES, *TUNED) and (name not in TUNED or pname in tuned[name])
    ]
    return Run(
        gpu=next(iter(stored.values()))["gpu"],
        stored=stored,
        measured=measured,
        ceil=ceil,
        rates=rates,
        w=perfmodel.weights(rates["fp32"], rates["ldst"], rates["other"]),
        lat=lat,
        props=device.target_properties(),
        tune_all=candidates["AUTOTUNE"],
        tuned=tuned["AUTOTUNE"],
        timed=timed,
        candidates=candidates,
    )


@dataclass
class Ncu:
    """What scripts/conv_counts.py --ncu stored, per (stage, problem)."""

    counts: dict = field(default_factory=dict)  # perfmodel.Counts
    l1_hit: dict = field(default_factory=dict)  # fraction of sectors
    busiest: dict = field(default_factory=dict)  # blocks the busiest SM ran
    pipes: dict = field(default_factory=dict)  # {model.NCU_PIPES label: value}
    stalls: dict = field(default_factory=dict)  # {model.NCU_STALLS label: warps per instruction issued}


def ncu_folder(slug: str | None = None) -> Path:
    return Path(results.RESULTS, slug or gpu_slug())


def _per_stage(by_kernel: dict) -> dict:
    """{stage: value} from ncu's {kernel name: value}."""
    short = {k.split("[")[0].split("::")[-1]: v for k, v in by_kernel.items()}
    return {name: short[fn] for name, fn in KERNEL_FN.items() if fn in short}


def read_ncu(folder: Path | None = None) -> Ncu:
    """The ncu counts and metrics in ``folder`` (``ncu_folder()``); empty where none were stored."""
    folder = folder or ncu_folder()
    out = Ncu()
    for pname in PROBLEMS:
        path = folder / f"conv_ncu_{pname}.csv"
        if not path.exists():
            continue
        text = path.read_text()
        read = {  # a metric absent from an older file reads empty
            m: _per_stage(perfmodel.read_ncu_metric(text, m))
            for m in (*model.NCU_CHECKS.values(), *model.NCU_PIPES.values(), *model.NCU_STALLS.values())
        }
        for name, c in _per_stage(perfmodel.read_ncu_csv(text)).items():
            out.counts[(name, pname)] = c
        for name, v in read[model.NCU_CHECKS["L1 hit %"]].items():
            out.l1_hit[(name, pname)] = v / 100
        for name, v in read[model.NCU_CHECKS["busiest SM's blocks"]].items():
            out.busiest[(name, pname)] = int(v)
        for table, metrics in ((out.pipes, model.NCU_PIPES), (out.stalls, model.NCU_STALLS)):
            for label, m in metrics.items():
                for name, v in read[m].items():
                    table.setdefault((name, pname), {})[label] = v
    return out


@dataclass
class Predictions:
    """The model's answer for every timed launch, and what the notebook's tables show of it."""

    model_of: dict = field(default_factory=dict)  # model.StagePrediction, where the SASS could be compiled
    gflops: dict = field(default_factory=dict)  # E's rule (perfmodel.taking_turns)
    side_gflops: dict = field(default_factory=dict)  # the pipes side by side (perfmodel.side_by_side)
    warps_per_scheduler: dict = field(default_factory=dict)  # the busiest SM's, in the first wave
    latency_eta: dict = field(default_factory=dict)  # the scoreboard's issue share at those warps


def predict_all(timed, w, lat, props, gpu_rates: dict, ncu_counts: dict, stored: dict | None = None) -> Predictions:
    """model.predict for every (stage, problem, tile) of ``timed``. Where the SASS cannot be had (the
    Numba stages in the simulator), the predictions that the run stored (``stored``, results.latest) stand in."""
    out = Predictions()
    for name, pname, tile in timed:
        key, p = (name, pname), common.PROBLEMS[pname]
        try:
            sp = model.predict(name, p, w, lat, tile=tile, props=props, counts=ncu_counts.get(key), **gpu_rates)
            side = model.predict(
                name,
                p,
                w,
                lat,
                tile=tile,
                props=props,
                counts=ncu_counts.get(key),
                slots=perfmodel.side_by_side,
                **gpu_rates,
            )
        except (FileNotFoundError, RuntimeError) as e:  # no ptxas or disassembler (SassUnavailable is a RuntimeError)
            if device.on_gpu():
                print(f"no prediction for {name}: {e}")
            sp = side = None  # in the simulator: Numba's stages cannot be compiled
        if sp is not None:
            out.model_of[key] = sp
            out.gflops[key], out.side_gflops[key] = sp.prediction.gflops, side.prediction.gflops
            wps = sp.waves.per_sm[0] * sp.waves.warps_per_block / 4  # first wave, busiest SM
            out.warps_per_scheduler[key] = wps
            out.latency_eta[key] = sp.efficiency(max(1, math.ceil(wps))) if sp.efficiency else None
        elif stored is not None:
            for metric, into in (("predicted_gflops", out.gflops), ("predicted_gflops_side_by_side", out.side_gflops)):
                if (name, pname, metric) in stored:
                    into[key] = float(stored[(name, pname, metric)]["value"])
    return out


# --- the numbers the chapter's pages quote ------------------------------------------------------------


def gain_split(before: float, middle: float, after: float) -> float:
    """The share of the time a step from rate ``before`` to rate ``after`` saves (per FLOP) that a stage
    between them, at rate ``middle``, already saves: (1/before - 1/middle) / (1/before - 1/after). Above 1
    or below 0 where the middle stage overshoots or goes backwards."""
    for v, name in ((before, "before"), (middle, "middle"), (after, "after")):
        if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
            raise ValueError(f"{name}: expected a positive rate, got {v!r}")
    if before == after:
        raise ValueError(f"before and after: the step must change the rate, got {before} for both")
    return (1 / before - 1 / middle) / (1 / before - 1 / after)


def step_split(step: tuple, predicted: dict, measured: dict, gpu: str) -> dict:
    """What the pages quote of a stage that splits a step (``step``: before, middle, after; the middle stage
    changes the language, the last the tiles and the loads): per problem, the middle stage's predicted
    share of the time the step saves (``gain_split``) and the rest, the measured shares where all three
    stages were timed, and the Measured words: the middle stage's rates and shares, or, where the run on
    ``gpu`` did not time it, that it is not timed yet. {glue name: value}."""
    before, middle, after = step
    name, out, share = SLUG[middle], {}, {}
    for pname in PROBLEMS:
        lang = gain_split(*(predicted[(s, pname)] for s in step))
        out[f"{name}_lang_pred_{pname}_pct"], out[f"{name}_tiles_pred_{pname}_pct"] = 100 * lang, 100 * (1 - lang)
        if all((s, pname) in measured for s in step):
            share[pname] = gain_split(*(measured[(s, pname)] for s in step))
            out[f"{name}_lang_{pname}_pct"], out[f"{name}_tiles_{pname}_pct"] = (
                100 * share[pname],
                100 * (1 - share[pname]),
            )
    if len(share) < len(PROBLEMS):
        out[f"{name}_measured"] = (
            f"Not timed yet on the {gpu}: its stored run is older than this stage. The next run of this page "
            "on a GPU times it and splits the step by measured rates."
        )
        return out
    rate = {pname: measured[(middle, pname)] for pname in PROBLEMS}
    c1, c2 = PROBLEMS
    out[f"{name}_measured"] = (
        f"{rate[c1] / 1e3:.2f} TFLOP/s on {c1} and {rate[c2] / 1e3:.2f} on {c2}, "
        f"{rate[c1] / measured[(before, c1)]:.1f} and {rate[c2] / measured[(before, c2)]:.1f} times {before}'s "
        f"rate; measured / predicted {rate[c1] / predicted[(middle, c1)]:.2f} and "
        f"{rate[c2] / predicted[(middle, c2)]:.2f}. Of the time {after} saves over {before}, the language buys "
        f"{100 * share[c1]:.0f}% on {c1} and {100 * share[c2]:.0f}% on {c2}, the tiles and vector loads the rest."
    )
    return out


# glue names: one short name per stage
SLUG = {
    "SEQ": "seq",
    "NAIVE": "naive",
    "COALESCING": "coal",
    "BLOCK TILING": "block",
    "SHARED": "shared",
    "SHARED C++": "shared_cpp",
    "VECTORIZE & UNROLL": "vec",
    "REGISTER TILING": "reg",
    "DOUBLE BUFFER": "db",
    "SPLIT-K": "splitk",
    "HALO TILE": "halo",
    "AUTOTUNE": "auto",
    "HALO AUTOTUNE": "halo_auto",
    "cuDNN": "cudnn",
    "cuDNN NHWC": "cudnn_nhwc",
    "cuDNN NCHW": "cudnn_nchw",
}


def glue_ncu(ncu: Ncu) -> None:
    """Glue what the pages quote of the ncu run: L1 hit rates, the issue share, the pipes and the stalls."""
    for (name, pname), hit in ncu.l1_hit.items():
        glue(f"{SLUG[name]}_{pname}_ncu_l1_pct", 100 * hit)
    for (name, pname), pipes in ncu.pipes.items():
        for label, short in (
            ("issue %", "issue_pct"),
            ("ALU %", "alu_pct"),
            ("FMA-heavy %", "fmaheavy_pct"),
            ("LSU", "lsu_g"),
            ("ADU", "adu_g"),
        ):
            if label in pipes:
                glue(f"{SLUG[name]}_{pname}_{short}", pipes[label] / 1e9 if label in ("LSU", "ADU") else pipes[label])
    for (name, pname), stalls in ncu.stalls.items():
        for label, v in stalls.items():
            glue(f"{SLUG[name]}_{pname}_stall_" + re.sub(r"[^A-Za-z0-9]+", "_", label), v)
    for (name, pname), c in ncu.counts.items():
        glue(f"{SLUG[name]}_{pname}_ldst_pct", 100 * c.ldst / c.total)  # memory instructions among all
    for (name, pname), blocks in ncu.busiest.items():
        glue(f"{SLUG[name]}_{pname}_ncu_busiest", blocks)


def glue_run(run: Run, pred: Predictions, slug: str) -> None:
    """Glue what the pages quote of the run: every stage's rate, prediction and their ratio, the model's
    terms, the problems' sizes; the SEQ and SPLIT-K spreads over every run stored for ``slug``."""
    glue("timed_gpu", run.gpu)
    glue("sms", run.props["sms"])
    glue("fma_ceiling_tflops", run.ceil.fma_gflops / 1e3)
    # The copy rate the prose quotes is the machine chapter's, as on every page; the model keeps this run's ceiling.
    copy_gbps, _ = quantities.copy_gbps()
    glue("copy_tbps", copy_gbps / 1e3)
    glue("w_ldst", run.w.ldst)
    for (name, pname), v in run.measured.items():
        if name in SLUG and pname in PROBLEMS:
            glue(f"{SLUG[name]}_{pname}_tflops", v / 1e3)
            glue(f"{SLUG[name]}_{pname}_ms", common.PROBLEMS[pname].flops / v / 1e6)
    for (name, pname), v in pred.gflops.items():
        glue(f"{SLUG[name]}_{pname}_pred_tflops", v / 1e3)
        glue(f"{SLUG[name]}_{pname}_ratio", run.measured[(name, pname)] / v)
    for (name, pname), sp in pred.model_of.items():
        glue(f"{SLUG[name]}_{pname}_E", sp.prediction.efficiency)
        glue(f"{SLUG[name]}_{pname}_wps", pred.warps_per_scheduler[(name, pname)])
        glue(f"{SLUG[name]}_{pname}_resident", sp.waves.resident)
        glue(f"{SLUG[name]}_{pname}_blocks", sp.waves.blocks)
        glue(f"{SLUG[name]}_{pname}_l1_hit", sp.l1_hit)
        if pred.latency_eta[(name, pname)] is not None:
            glue(f"{SLUG[name]}_{pname}_eta_loss_pct", 100 * (1 - pred.latency_eta[(name, pname)]))
    for pname in PROBLEMS:  # the first two GPU stages: the layout change COALESCING makes
        naive, coal = (pred.gflops.get((name, pname)) for name in stages.GPU_STAGES[:2])
        if naive and coal:
            glue(f"coal_over_naive_pred_{pname}", coal / naive)
    if (HALO, "conv2") in pred.model_of:
        glue("halo_conv2_idle_sms", max(0, run.props["sms"] - pred.model_of[(HALO, "conv2")].waves.blocks))
    for pname in PROBLEMS:
        p = common.PROBLEMS[pname]
        glue(f"{pname}_xf_mb", 4 * (p.n * p.h * p.w * p.c + 9 * p.c * p.k) / 1e6)  # input and filter, FP32
        glue(f"{pname}_y_mb", 4 * p.n * p.h * p.w * p.k / 1e6)
        glue(f"{pname}_f_mb", 4 * 9 * p.c * p.k / 1e6)
        glue(f"{pname}_y_ms", 4 * p.n * p.h * p.w * p.k / (copy_gbps * 1e6))  # y once at the copy bandwidth
        # what an SM's blocks of DOUBLE BUFFER load between two taps: a tap's sweep over all C channels
        glue(f"{pname}_tap_kb", 3 * p.c * (128 + 64) * 4 / 1e3)
    c1 = common.PROBLEMS["conv1"]
    if (HALO, "conv1") in run.measured:
        glue(
            "halo_conv1_epilogue_pct",
            100
            * (4 * c1.n * c1.h * c1.w * c1.k / (copy_gbps * 1e6))
            / (c1.flops / run.measured[(HALO, "conv1")] / 1e6),
        )
    glue("splitk_conv1_epilogue_gb", model.epilogue_bytes("SPLIT-K", c1) / 1e9)
    rows = results.load("conv", slug)
    # SEQ runs on the host CPU, whose speed differs from run to run: the range over every stored run
    cpu = {s.name for s in registry.REGISTRY if not s.gpu}
    seq_runs = [float(r["value"]) for r in rows if r["kernel"] in cpu and r["metric"] == "gflops"]
    if seq_runs:
        glue("seq_min_gflops", min(seq_runs))
        glue("seq_max_gflops", max(seq_runs))
        glue("seq_runs", len(seq_runs) // 2)
    # SPLIT-K on conv2, whose last wave lands differently from run to run: its time over every stored run
    split_k = {s.name for s in registry.REGISTRY if s.split_k and not s.runs}
    split_ms = [
        common.PROBLEMS["conv2"].flops / float(r["value"]) / 1e6
        for r in rows
        if r["kernel"] in split_k and r["problem"] == "conv2" and r["metric"] == "gflops"
    ]
    if split_ms:
        glue("splitk_conv2_runs", len(split_ms))
        glue("splitk_conv2_spread_pct", 100 * max(abs(v / np.median(split_ms) - 1) for v in split_ms))

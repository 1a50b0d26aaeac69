"""The performance model's arithmetic and parsers, on fixed counts and hand-made SASS/ncu text."""

import math

import pytest

from kernels.harness import perfmodel as pm


def test_efficiency_matches_the_formula():
    c, w = pm.Counts(fp32=64, ldst=4, other=10), pm.weights(fp32_rate=4.0, ldst_rate=1.0, other_rate=2.0)
    assert (w.compute, w.ldst, w.other) == (1.0, 4.0, 2.0)
    assert pm.efficiency(c, w) == pytest.approx(64 / (64 + 4 * 4 + 10 * 2))


def test_side_by_side_charges_the_busiest_of_issue_and_pipes():
    c, w = pm.Counts(fp32=64, ldst=4, other=10), pm.weights(fp32_rate=4.0, ldst_rate=1.0, other_rate=2.0)
    assert pm.efficiency(c, w, pm.side_by_side) == 64 / 78  # the issue: 78 instructions
    assert pm.side_by_side(pm.Counts(2, 30, 4), w) == 120  # the load pipe: 30 x 4
    assert pm.side_by_side(pm.Counts(0, 1, 40), w) == 80  # the other class's pipe: 40 x 2
    assert pm.taking_turns(c, w) == 64 + 16 + 20
    p = pm.predict(1e12, c, w, peak_gflops=1000.0, slots=pm.side_by_side)
    assert p.efficiency == 64 / 78 and p.ms == pytest.approx(1e12 / (1000e9 * 64 / 78) * 1e3)
    assert pm.predict(1e12, c, w, peak_gflops=1000.0).efficiency == pm.efficiency(c, w) == 64 / 100


def test_efficiency_is_one_for_pure_fp32_and_falls_with_overhead():
    w = pm.weights(4.0, 1.0, 2.0)
    assert pm.efficiency(pm.Counts(10, 0, 0), w) == 1.0
    assert pm.efficiency(pm.Counts(10, 1, 0), w) < pm.efficiency(pm.Counts(10, 0, 1), w) < 1.0


def test_bad_counts_and_rates_are_rejected():
    with pytest.raises(ValueError, match="ldst_rate must be positive"):
        pm.weights(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="no instructions"):
        pm.efficiency(pm.Counts(0, 0, 0), pm.weights(1, 1, 1))
    with pytest.raises(ValueError, match=">= 0"):
        pm.efficiency(pm.Counts(1, -1, 0), pm.weights(1, 1, 1))


def test_occupancy_full_machine_and_tail():
    # 4 waves exactly: no loss
    assert pm.occupancy_ratio(blocks=4 * 132 * 2, sms=132, warps_per_block=8, resident_blocks=2) == 1.0
    # 1.5 waves of one block per SM: the second wave is half empty
    assert pm.occupancy_ratio(blocks=198, sms=132, warps_per_block=8, resident_blocks=1) == pytest.approx(198 / 264)


def test_occupancy_with_a_measured_tail_placement():
    """SPLIT-K on conv2: 600 blocks, 3 per SM. Spread, the 204 after the first wave are 2 per SM;
    placed 3 per SM on the first SMs to free their slots, the busiest SM runs two full waves."""
    spread = pm.occupancy_ratio(blocks=600, sms=132, warps_per_block=4, resident_blocks=3)
    assert spread == pytest.approx(600 / 132 / 5)
    assert pm.occupancy_ratio(blocks=600, sms=132, warps_per_block=4, resident_blocks=3, tail_per_sm=2) == spread
    assert pm.occupancy_ratio(
        blocks=600, sms=132, warps_per_block=4, resident_blocks=3, tail_per_sm=3
    ) == pytest.approx(600 / 132 / 6)
    for impossible in (1, 4):  # fewer than the spread, more than fit
        with pytest.raises(ValueError, match="tail_per_sm"):
            pm.occupancy_ratio(blocks=600, sms=132, warps_per_block=4, resident_blocks=3, tail_per_sm=impossible)


def test_tail_bounds():
    """SPLIT-K on conv2: 204 blocks left after a wave of 396, two or three on the busiest SM; a launch of
    one partial wave has the same choice; one that ends in a full wave has none."""
    assert pm.tail_bounds(600, 132, 3) == (2, 3)
    assert pm.tail_bounds(200, 132, 3) == (2, 3)
    assert pm.tail_bounds(140, 132, 8) == (2, 8)
    assert pm.tail_bounds(396 * 2, 132, 3) == (0, 0)


def test_a_tail_after_latency_bound_waves_clusters():
    """SPLIT-K on conv2 again. Issue-bound full waves finish block by block and the tail spreads (2 per
    SM); latency-bound ones finish together and the first SMs to free take 3 each. A launch that is
    one partial wave spreads either way."""
    assert pm.wave_blocks(600, 132, 4, 3, efficiency=lambda w: 1.0) == [3, 2]
    assert pm.wave_blocks(600, 132, 4, 3, efficiency=lambda w: 0.97) == [3, 3]
    assert pm.occupancy_ratio(600, 132, 4, 3, efficiency=lambda w: 0.97) == pytest.approx(600 / 132 / 6 * 0.97)
    assert pm.wave_blocks(200, 132, 4, 3, efficiency=lambda w: 0.5) == [2]
    assert pm.wave_blocks(600, 132, 4, 3, efficiency=lambda w: 0.97, tail_per_sm=2) == [3, 2]
    assert pm.wave_blocks(396 * 2, 132, 4, 3, efficiency=lambda w: 0.5) == [3, 3]  # no tail


def test_occupancy_too_few_blocks_and_warps():
    # 66 blocks on 132 SMs: half the SMs idle (DIGEST 002's conv2 case)
    assert pm.occupancy_ratio(blocks=66, sms=132, warps_per_block=8, resident_blocks=4) == pytest.approx(0.5)
    # every SM holds one 2-warp block: half of its 4 schedulers have nothing to issue
    assert pm.occupancy_ratio(blocks=132, sms=132, warps_per_block=2, resident_blocks=4) == pytest.approx(0.5)


def test_blocks_per_sm_limits():
    # registers: 256 threads x 128 registers = 32768 -> 2 blocks in 65536
    assert pm.blocks_per_sm(256, 128, 0) == 2
    # shared memory: 100 KB + 1 KB reserved per block in 228 KB -> 2
    assert pm.blocks_per_sm(64, 32, 100 * 1024) == 2
    # threads: 1024-thread blocks, 2048 per SM
    assert pm.blocks_per_sm(1024, 16, 0) == 2
    # register granularity: 130 registers round up to 136 per thread (256 per warp granule)
    assert pm.blocks_per_sm(128, 130, 0) == 65536 // (math.ceil(130 * 32 / 256) * 256 * 4)
    # sub-partitions: 2-warp blocks at 48 registers (1536 per warp): 10 warps in each quarter of the
    # register file, 40 per SM, 20 blocks -- not the 21 that the whole file divided by 3072 gives
    assert pm.register_warps(48) == 40
    assert pm.blocks_per_sm(64, 48, 0) == 20
    assert pm.blocks_per_sm(64, 48, 0, sub_partitions=1) == 21


def test_register_warps_beside_counts_the_rest_of_each_sub_partition():
    # 48 registers: 10 warps of 1,536 in each 16,384-register share leave 1,024, one warp of 32 registers
    assert pm.register_warps_beside(48, 32) == 4
    assert pm.register_warps_beside(48, 33) == 0  # 33 registers take 1,280 a warp
    # 150 registers: 3 warps of 4,864 leave 1,792, less than a 127-register warp's 4,096
    assert pm.register_warps_beside(150, 127) == 0
    assert pm.register_warps_beside(128, 128) == 0  # a full register file leaves nothing


def test_predict_compute_and_memory_bound():
    w = pm.weights(4.0, 1.0, 2.0)
    p = pm.predict(1e9, pm.Counts(1, 0, 0), w, peak_gflops=1000.0)
    assert p.gflops == pytest.approx(1000.0) and p.bound == "compute"
    p = pm.predict(1e9, pm.Counts(64, 4, 10), w, peak_gflops=1000.0, occupancy=0.5)
    assert p.gflops == pytest.approx(1000.0 * 64 / 100 * 0.5)
    p = pm.predict(1e9, pm.Counts(1, 0, 0), w, peak_gflops=1000.0, bytes_moved=1e9, bandwidth_gbps=100.0)
    assert p.bound == "memory" and p.ms == pytest.approx(10.0)
    for bandwidth in (None, 0.0, -100.0):  # no memory bound dropped in silence
        with pytest.raises(ValueError, match="bytes_moved"):
            pm.predict(1e9, pm.Counts(1, 0, 0), w, peak_gflops=1000.0, bytes_moved=1e9, bandwidth_gbps=bandwidth)


def test_predict_adds_the_epilogue_to_the_bound():
    # 1 ms of compute, then 1e8 bytes of output stores at 100 GB/s: 1 ms more, not hidden behind the FMAs
    w = pm.weights(4.0, 1.0, 2.0)
    p = pm.predict(1e9, pm.Counts(1, 0, 0), w, peak_gflops=1000.0, bandwidth_gbps=100.0, epilogue_bytes=1e8)
    assert p.bound == "compute" and p.ms == pytest.approx(2.0) and p.gflops == pytest.approx(500.0)
    with pytest.raises(ValueError, match="epilogue_bytes"):
        pm.predict(1e9, pm.Counts(1, 0, 0), w, peak_gflops=1000.0, epilogue_bytes=1e8)


def test_predict_l1_wavefront_bound():
    # 1e9 FLOP at 1000 GFLOP/s is 1 ms of compute; 4e6 wavefronts at 1e9 per second are 4 ms in the L1
    w = pm.weights(4.0, 1.0, 2.0)
    p = pm.predict(1e9, pm.Counts(1, 0, 0), w, peak_gflops=1000.0, wavefronts=4e6, wavefront_rate=1e9)
    assert p.bound == "L1" and p.ms == pytest.approx(4.0) and p.gflops == pytest.approx(250.0)
    p = pm.predict(1e9, pm.Counts(1, 0, 0), w, peak_gflops=1000.0, wavefronts=4e5, wavefront_rate=1e9)
    assert p.bound == "compute" and p.ms == pytest.approx(1.0)
    with pytest.raises(ValueError, match="wavefront_rate"):
        pm.predict(1e9, pm.Counts(1, 0, 0), w, peak_gflops=1000.0, wavefronts=1.0)


def test_predict_charges_padded_fp32_work():
    # 1e9 FLOP; the launch issued 25% more FFMAs than useful (padding): the time grows by 1.25
    w = pm.weights(4.0, 1.0, 2.0)
    ffma = 1e9 / 64
    exact = pm.predict(1e9, pm.Counts(ffma, 0, 0), w, peak_gflops=1000.0, fp32_flops=64)
    padded = pm.predict(1e9, pm.Counts(1.25 * ffma, 0, 0), w, peak_gflops=1000.0, fp32_flops=64)
    assert exact.gflops == pytest.approx(1000.0) and padded.gflops == pytest.approx(800.0)
    assert pm.predict(1e9, pm.Counts(1.25 * ffma, 0, 0), w, peak_gflops=1000.0).gflops == pytest.approx(1000.0)


def test_never_executed_padding_counts_as_issue_only():
    text = """
        /*0000*/                   LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64] ;
        /*0010*/              @!PT LDS RZ, [RZ] ;
        /*0020*/               @P0 LDS R3, [R2] ;
        /*0030*/                   EXIT ;
"""
    assert pm.classify("LDS", "@!PT") == "other" and pm.classify("LDS", "@P0") == "ldst"
    assert pm.static_counts(pm.parse_sass("//---- .text.k ----\n" + text)) == pm.Counts(fp32=0, ldst=2, other=2)


SASS = """
//--------------------- .text.k                  --------------------------
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
.L_x_1:
        /*0020*/                   LDS.128 R4, [R2] ;
.L_x_0:
        /*0030*/                   FFMA R8, R4, R5, R8 ;
        /*0040*/                   FFMA R9, R4, R6, R9 ;
        /*0050*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0060*/               @P0 BRA `(.L_x_0) ;
        /*0070*/                   STG.E [R10.64], R8 ;
        /*0080*/               @P1 BRA `(.L_x_1) ;
        /*0090*/                   EXIT ;
.L_x_2:
        /*00a0*/                   BRA `(.L_x_2);
        /*00b0*/                   NOP;
"""


def test_parse_sass_classifies_and_drops_the_tail():
    ins = pm.parse_sass(SASS)
    assert [i.base for i in ins][:3] == ["MOV", "S2R", "LDS"] and ins[2].opcode == "LDS.128"
    assert ins[-1].opcode == "BRA" and ins[-1].label == ".L_x_2"  # the trap; the NOP is gone
    assert pm.static_counts(ins) == pm.Counts(fp32=2, ldst=2, other=7)


def test_parse_sass_picks_one_kernel_by_name():
    two = SASS + SASS.replace(".text.k", ".text.other")
    with pytest.raises(ValueError, match=r"the SASS text holds kernels \[.*\]: name one"):
        pm.parse_sass(two)
    with pytest.raises(ValueError, match="no kernel 'nope' in the SASS text"):
        pm.parse_sass(two, "nope")
    assert [i.opcode for i in pm.parse_sass(two, "other")] == [i.opcode for i in pm.parse_sass(SASS)]


def test_loops_and_trip_counts():
    ins = pm.parse_sass(SASS)
    loops = pm.find_loops(ins)
    assert [(lp.start, lp.end, lp.depth) for lp in loops] == [(0x20, 0x80, 0), (0x30, 0x60, 1)]
    c = pm.sass_counts(ins, [5, 7])  # outer 5 times, inner 7 times per outer iteration
    assert c.fp32 == 2 * 5 * 7
    assert c.ldst == 5 + 5 + 0  # LDS.128 and STG once per outer iteration
    assert c.other == 2 + 2 * 5 * 7 + 5 + 1 + 1  # MOV, S2R; IADD3+BRA inner; outer BRA; EXIT; trap
    with pytest.raises(ValueError, match="2 loops but 1 trip"):
        pm.sass_counts(ins, [5])


NCU = """==PROF== Connected to process 1
PASS something the program printed
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","conv_double_buffer","1","7","(8, 16, 1)","(25, 8, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed.sum","inst","1,000,000"
"0","1","python","h","conv_double_buffer","1","7","(8, 16, 1)","(25, 8, 1)","0","9.0","Command line profiler metrics","smsp__sass_thread_inst_executed_op_fp32_pred_on.sum","inst","19,200,000"
"0","1","python","h","conv_double_buffer","1","7","(8, 16, 1)","(25, 8, 1)","0","9.0","Command line profiler metrics","smsp__sass_thread_inst_executed_op_memory_pred_on.sum","inst","3,200,000"
"""  # noqa: E501 -- ncu's CSV lines as it prints them


def test_read_ncu_csv():
    counts = pm.read_ncu_csv(NCU)
    assert counts == {"conv_double_buffer": pm.Counts(fp32=600_000, ldst=100_000, other=300_000)}
    second_launch = "".join(
        line.replace('"0","1","python"', '"1","1","python"', 1) + "\n"
        for line in NCU.splitlines()
        if line.startswith('"0"')
    )
    assert pm.read_ncu_csv(NCU + second_launch) == {"conv_double_buffer": pm.Counts(1_200_000, 200_000, 600_000)}


def test_read_ncu_metric_reads_one_metric_per_kernel():
    hit = NCU + (
        '"0","1","python","h","conv_double_buffer","1","7","(8, 16, 1)","(25, 8, 1)","0","9.0",'
        '"Command line profiler metrics","l1tex__t_sector_hit_rate.pct","%","61.5"\n'
    )
    assert pm.read_ncu_metric(hit, "l1tex__t_sector_hit_rate.pct") == {"conv_double_buffer": 61.5}
    assert pm.read_ncu_metric(hit, "smsp__inst_executed.sum") == {"conv_double_buffer": 1e6}
    assert pm.read_ncu_metric(NCU, "l1tex__t_sector_hit_rate.pct") == {}
    assert pm.read_ncu_csv(hit) == pm.read_ncu_csv(NCU)  # an extra metric leaves the counts alone


def test_read_ncu_csv_rejects_missing_metrics_and_headers():
    with pytest.raises(ValueError, match="no ncu CSV header"):
        pm.read_ncu_csv("nothing here")
    partial = "\n".join(NCU.splitlines()[:-1])
    with pytest.raises(ValueError, match="lacks"):
        pm.read_ncu_csv(partial)


# --- the latency model: register scoreboard, one scheduler's warps, waves ---------------------

LAT = pm.Latencies(alu=4, shared=20, global_=100, barrier=10, l1=30)


def body(text: str):
    """Instructions of a hand-written loop body (one per line, nvdisasm style, addresses added)."""
    lines = [f"        /*{16 * n:04x}*/ {line.strip()} ;" for n, line in enumerate(text.strip().splitlines())]
    return pm.parse_sass("//---- .text.k ----\n" + "\n".join(lines) + f"\n        /*{16 * len(lines):04x}*/ EXIT ;")[
        :-1
    ]


def test_register_operands():
    ffma, lds, sts, isetp, ldg, lea, atomg = body("""FFMA R1, R2, R3.reuse, R1
        LDS.128 R4, [R8+0x10]
        STS.128 [R9], R4
        ISETP.GE.AND P0, PT, R1, 0x4, PT
        @P1 LDG.E R2, desc[UR4][R6.64]
        LEA R10, P2, R11, UR6, 0x2
        ATOMG.E.ADD.STRONG.GPU P1, R3, [R8.64], R5""")
    assert pm.register_operands(ffma) == ({"R1"}, {"R1", "R2", "R3"})
    assert pm.register_operands(lds) == ({"R4", "R5", "R6", "R7"}, {"R8"})
    assert pm.register_operands(sts) == (set(), {"R9", "R4", "R5", "R6", "R7"})
    assert pm.register_operands(isetp) == ({"P0"}, {"R1"})
    assert pm.register_operands(ldg) == ({"R2"}, {"P1", "UR4", "R6", "R7"})
    assert pm.register_operands(lea) == ({"R10", "P2"}, {"R11", "UR6"})
    assert pm.register_operands(atomg) == ({"R3", "P1"}, {"R8", "R9", "R5"})


def test_one_warp_waits_on_its_loads_and_barriers():
    # LDS at 0, the FFMA that reads it at 20, the branch at 21, the next LDS at 22: 22 cycles
    chain = body("LDS R1, [R0]\nFFMA R2, R1, R1, R2\nBRA `(.L_x_0)")
    assert pm.scheduler_cycles(chain, LAT) == 22
    # a global load instead: 100 + 2
    assert pm.scheduler_cycles(body("LDG.E R1, desc[UR4][R6.64]\nFFMA R2, R1, R1, R2\nBRA `(.L_x_0)"), LAT) == 102
    # independent work issues one per cycle; a counter carried across iterations waits its 4 cycles
    assert pm.scheduler_cycles(body("IADD3 R1, R5, 0x1, RZ\nIADD3 R2, R6, 0x1, RZ\nBRA `(.L_x_0)"), LAT) == 3
    assert pm.scheduler_cycles(body("IADD3 R1, R1, 0x1, RZ\nIADD3 R2, R6, 0x1, RZ\nBRA `(.L_x_0)"), LAT) == 4
    # an instruction that overwrites the register a load is still writing waits for the load: 20 + 2
    assert pm.scheduler_cycles(body("LDS R1, [R0]\nIADD3 R1, R5, 0x1, RZ\nBRA `(.L_x_0)"), LAT) == 22
    # a barrier holds the warp 10 cycles: 10 + 2
    assert pm.scheduler_cycles(body("BAR.SYNC.DEFER_BLOCKING 0x0\nFFMA R1, R1, R1, R1\nBRA `(.L_x_0)"), LAT) == 12


def test_more_warps_fill_the_wait():
    chain = body("LDS R1, [R0]\nFFMA R2, R1, R1, R2\nBRA `(.L_x_0)")
    # round robin: LDS of warps 0, 1 at 0, 1; FFMAs at 20, 21; branches 22, 23; next LDS at 24
    assert pm.scheduler_cycles(chain, LAT, warps=2) == 24
    # 8 warps that started together stay in step: 8 LDS, the wait, 8 FFMAs, 8 branches = 20 + 16
    assert pm.scheduler_cycles(chain, LAT, warps=8) == 36
    # 8 warps of a 12-instruction body (the wait covered by the other warps' independent work)
    wide = body("LDS R1, [R0]\n" + "IADD3 R3, R4, 0x1, RZ\n" * 9 + "FFMA R2, R1, R1, R2\nBRA `(.L_x_0)")
    assert pm.scheduler_cycles(wide, LAT, warps=8) == 96
    assert pm.issue_efficiency(2, 3, 24) == pytest.approx(0.25) and pm.issue_efficiency(8, 3, 24) == 1.0
    # two warps of one block on this scheduler: barriers at 0 and 1, both leave at 1 + 10, then
    # FFMA, FFMA, BRA, BRA and the next barrier at 15
    bar = body("BAR.SYNC.DEFER_BLOCKING 0x0\nFFMA R1, R1, R1, R1\nBRA `(.L_x_0)")
    assert pm.scheduler_cycles(bar, LAT, warps=2, warps_per_block=2) == 15
    with pytest.raises(ValueError, match="multiple of warps_per_block"):
        pm.scheduler_cycles(bar, LAT, warps=3, warps_per_block=2)


def test_blocks_out_of_step_hide_each_other_s_waits():
    """Two one-warp blocks: started together they wait for their loads at the same time; spread over the
    loop, one's instructions issue while the other waits, close to a lone warp's pace."""
    step = body(
        "LDG.E R1, desc[UR4][R6.64]\nFFMA R2, R1, R1, R2\n"
        + "IADD3 R3, R4, 0x1, RZ\n" * 8
        + "BAR.SYNC.DEFER_BLOCKING 0x0\nBRA `(.L_x_0)"
    )
    # alone: the load's 100 cycles, 9 instructions, the barrier's 10, the branch: the next load at 120
    assert pm.scheduler_cycles(step, LAT) == pm.scheduler_cycles(step, LAT, spread=True) == 120
    # in step: both loads, both waits at once, then both warps' 11 instructions and the barrier: 130
    together, spread = (pm.scheduler_cycles(step, LAT, warps=2, spread=s) for s in (False, True))
    assert together == 130 and 120 <= spread < 125
    # a block's own warps stay together (barrier partners): two blocks of two warps, each block spread
    assert pm.scheduler_cycles(step, LAT, warps=4, warps_per_block=2, spread=True) < pm.scheduler_cycles(
        step, LAT, warps=4, warps_per_block=2
    )


def test_held_slots_hide_a_wait_only_behind_the_other_warps_slots():
    """With E's weights each instruction holds the scheduler for its slots (here a load 4, other 2)."""
    w = pm.Weights(1.0, 4.0, 2.0)
    assert (
        pm.scheduler_cycles(body("IADD3 R1, R5, 0x1, RZ\nIADD3 R2, R6, 0x1, RZ\nBRA `(.L_x_0)"), LAT, slot_weights=w)
        == 6
    )
    # a load, the FFMA that reads it, 8 independent integer instructions: 4 + 1 + 16 + 2 = 23 slots a warp
    step = body("LDS R1, [R0]\nFFMA R2, R1, R1, R2\n" + "IADD3 R3, R4, 0x1, RZ\n" * 8 + "BRA `(.L_x_0)")
    issue = 23
    # one warp: the FFMA waits for the load (20), then 1 + 16 + 2 slots: 39 cycles
    assert pm.scheduler_cycles(step, LAT, slot_weights=w) == 39
    # two warps: one cycle per instruction hides the wait in the slots E charges beyond it (eta 1);
    # held slots leave the scheduler idle while both warps wait on their loads
    free, held = (pm.scheduler_cycles(step, LAT, warps=2, slot_weights=sw) for sw in (None, w))
    assert pm.issue_efficiency(2, issue, free) == 1.0 > pm.issue_efficiency(2, issue, held)
    # four warps' slots cover the wait either way
    assert pm.issue_efficiency(4, issue, pm.scheduler_cycles(step, LAT, warps=4, slot_weights=w)) == 1.0


def test_cp_async_double_buffer_halves_the_wait():
    # the copy of iteration k lands 100 cycles after it issued; waiting for all groups costs the whole
    # latency each iteration (DEPBAR at 2 waits until 100, the next copy at 102); keeping one group in
    # flight lets two iterations share one wait (98 + 4 cycles)
    copy = "LDGSTS.E.BYPASS.128 [R0], desc[UR4][R2.64]\nLDGDEPBAR\nDEPBAR.LE SB0, {}\nBRA `(.L_x_0)"
    assert pm.scheduler_cycles(body(copy.format("0x0")), LAT) == 102
    assert pm.scheduler_cycles(body(copy.format("0x1")), LAT) == 51


def test_expand_loop_repeats_inner_loops():
    ins = pm.parse_sass(SASS)
    outer, inner = pm.find_loops(ins)
    flat = pm.expand_loop(ins, outer, {inner.start: 3})
    assert [i.base for i in flat] == ["LDS"] + ["FFMA", "FFMA", "IADD3", "BRA"] * 3 + ["STG", "BRA"]


def test_occupancy_with_latency_efficiency():
    eff = {3: 1.0, 1: 0.5}.get
    # one full wave of 3 four-warp blocks per SM, then one block per SM at half speed: 3 + 2 = 5 units
    # of time where 4 would do
    assert pm.occupancy_ratio(132 * 4, 132, 4, 3, efficiency=eff) == pytest.approx(4 / 5)
    # a partial last wave is as long as its busiest SM: 2 full, then 66 blocks on 66 SMs
    assert pm.occupancy_ratio(132 * 2 + 66, 132, 4, 2) == pytest.approx(2.5 / 3)
    with pytest.raises(ValueError, match="efficiency"):
        pm.occupancy_ratio(132, 132, 4, 1, efficiency=lambda w: 0.0)

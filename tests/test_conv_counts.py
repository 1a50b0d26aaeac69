"""scripts/conv_counts.py --ncu: one Nsight Compute run over both problems, split into one CSV per problem."""

import pytest

import conv_counts
from kernels.conv import common, stored_run

HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
)


def fake_ncu(launches: list[tuple[str, float]]) -> str:
    """ncu's CSV of ``launches`` (kernel name, a value that tells them apart), the program's lines before it."""
    lines = ["==PROF== Connected to process 1", "ran NAIVE on conv1: finite", HEADER]
    for i, (kernel, value) in enumerate(launches):
        for metric, v in zip(conv_counts.perfmodel.NCU_METRICS, (4 * value, 32 * value, 32 * value), strict=True):
            lines.append(
                f'"{i}","1","python","h","{kernel}","1","7","(8,1,1)","(1,1,1)","0","9.0","x","{metric}","","{v}"'
            )
    return "\n".join(lines) + "\n"


def test_one_run_is_split_into_each_problems_launches(tmp_path, monkeypatch):
    kernels = [stored_run.KERNEL_FN[s.name] for s in conv_counts.chosen()]
    problems = ["conv1", "conv2"]
    assert all(conv_counts.takes(s, common.PROBLEMS[p]) for s in conv_counts.chosen() for p in problems)
    launches = [(k, 1.0) for k in kernels] + [(k, 2.0) for k in kernels]  # conv2's counts twice conv1's
    monkeypatch.setattr(conv_counts.check, "ncu_csv", lambda *args: fake_ncu(launches))
    monkeypatch.setattr(conv_counts, "ncu_path", lambda problem: tmp_path / f"conv_ncu_{problem}.csv")
    assert conv_counts.run_ncu(problems) == [tmp_path / f"conv_ncu_{p}.csv" for p in problems]
    counts = stored_run.read_ncu(tmp_path).counts
    for name in stored_run.KERNEL_FN:
        one, two = counts[(name, "conv1")], counts[(name, "conv2")]
        assert (one.total, two.total) == (4.0, 8.0), name


def test_a_run_with_other_launches_than_the_stages_is_refused(tmp_path, monkeypatch):
    kernels = [stored_run.KERNEL_FN[s.name] for s in conv_counts.chosen()]
    monkeypatch.setattr(conv_counts.check, "ncu_csv", lambda *args: fake_ncu([(k, 1.0) for k in kernels]))
    monkeypatch.setattr(conv_counts, "ncu_path", lambda problem: tmp_path / f"conv_ncu_{problem}.csv")
    with pytest.raises(RuntimeError, match="ncu profiled"):
        conv_counts.run_ncu(["conv1", "conv2"])
    assert not list(tmp_path.iterdir())

import matplotlib
import matplotlib.text
import pytest

from kernels.harness import roofline

matplotlib.use("Agg")


def test_floor_picks_the_larger_time():
    f = roofline.floor(6e9, 3e8, gflops=60000.0, gbps=3000.0)
    assert f.compute_ms == pytest.approx(0.1) and f.memory_ms == pytest.approx(0.1)
    f = roofline.floor(1e9, 3e9, gflops=60000.0, gbps=3000.0)
    assert f.bound == "memory" and f.floor_ms == pytest.approx(1.0)
    assert "memory-bound" in str(f)


def test_floor_rejects_nonsense():
    with pytest.raises(ValueError, match=">= 0"):
        roofline.floor(-1, 1, gflops=1, gbps=1)
    with pytest.raises(ValueError, match="positive"):
        roofline.floor(1, 1, gflops=0, gbps=1)


def test_attainable_is_the_lower_roof():
    assert roofline.attainable(1.0, gflops=100.0, gbps=10.0) == 10.0
    assert roofline.attainable(100.0, gflops=100.0, gbps=10.0) == 100.0
    with pytest.raises(ValueError):
        roofline.attainable(0.0, gflops=100.0, gbps=10.0)


def test_plot_draws_roofs_and_points():
    ax = roofline.plot(gflops=60000, gbps=3000, points={"k": (2.0, 5000.0)}, roofs={"smem": (30000, "bw")})
    assert len(ax.get_lines()) >= 4
    assert any(t.get_text() == "k" for t in ax.texts)
    texts = [t for t in ax.figure.findobj(matplotlib.text.Text) if t.get_text()]
    assert min(t.get_fontsize() for t in texts) >= 9, "text readable at the page's width"
    assert ax.figure.get_size_inches()[0] >= 8

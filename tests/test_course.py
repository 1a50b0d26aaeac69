"""The reader layer: the results page from any subset of GPUs and chapters, the published-repository
config (no placeholder URL), the Colab set-up, and the course pages' references to exercises."""

import ast
import itertools
import json
import re
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import matplotlib.pyplot as plt
import matplotlib.text
import pytest
import yaml

import book_config
import results_page
from kernels.harness import colab, device, results

ROOT = Path(__file__).resolve().parents[1]


def write_rows(root: Path, gpu: str, chapter: str, rows: list[tuple], date="2026-01-01T00:00:00Z"):
    env = {
        "date": date,
        "commit": "abc",
        "gpu": gpu,
        "gpu_slug": device.slug(gpu),
        "driver": "1.0",
        "cuda_runtime": "12.9",
    }
    results.record(
        chapter,
        [dict(zip(("kernel", "problem", "metric", "value", "unit"), r, strict=True)) for r in rows],
        env=env,
        root=root,
    )


# --- the results page ----------------------------------------------------------------------------


def test_results_page_with_two_gpus_and_a_subset_of_chapters(tmp_path):
    root, out = tmp_path / "results", tmp_path / "generated"
    write_rows(root, "GPU Alpha", "machine", [("memcpy", "1024 MiB", "GB/s", 1000.0, "GB/s")])
    write_rows(
        root, "GPU Alpha", "machine", [("memcpy", "1024 MiB", "GB/s", 1234.0, "GB/s")], date="2026-02-01T00:00:00Z"
    )  # a newer run of the same number wins
    write_rows(
        root,
        "GPU Beta",
        "machine",
        [("memcpy", "1024 MiB", "GB/s", 567.0, "GB/s"), ("copy_kernel", "1024 MiB", "GB/s", 432.0, "GB/s")],
    )
    write_rows(root, "GPU Beta", "ssim", [("V1", "1x3x2160x3840", "ms", 3.5, "ms")])
    md = results_page.write(root, out).read_text()
    copy = md.split("### Copy bandwidth, 1 GiB")[1].split("###")[0]
    assert "| memcpy | 1,234 | 567 |" in copy and "| copy_kernel | -- | 432 |" in copy
    assert "| V1 | -- |" not in md and re.search(r"\| V1 \| 3\.5 \| 2\.26 \|", md), "Beta's V1 beside the A100's"
    assert "No GPU has recorded this chapter (`conv`) yet" in md
    assert "| GPU Alpha | 1.0 | 12.9 | machine | 2026-02-01 | abc |" in md
    images = re.findall(r"\]\(_generated/results/([\w.-]+)\)", md)
    assert images and all((out / "results" / name).stat().st_size > 1000 for name in images)


def test_probes_summary_divides_by_each_gpus_own_lanes(tmp_path):
    """A GPU's FMA rate per lane uses its own FP32 lanes (64 per SM on an A100, 128 on an H100), from
    the compute capability its machine chapter recorded."""
    root = tmp_path / "results"
    fma = ("fma v2 double loop", "1 x 1024 threads", "FMA per cycle per SM", 64.0, "FMA/cycle/SM")
    for gpu, cc in (("GPU Hopper", "90"), ("GPU Ampere", "80")):
        write_rows(root, gpu, "probes", [fma])
        write_rows(root, gpu, "machine", [("device", "-", "cc", cc, ""), ("device", "-", "sms", 100, "")])
    table = results_page.probes_summary(results_page.measured(root))
    (per_lane,) = [line for line in table.splitlines() if line.startswith("| FMA per cycle per lane, one chain")]
    assert "| 1 | 0.5 |" in per_lane  # columns in name order: Ampere 64 / 64, Hopper 64 / 128


def test_results_page_without_any_results(tmp_path):
    md = results_page.write(tmp_path / "none", tmp_path / "generated").read_text()
    assert "No GPU has recorded results yet." in md
    assert "NVIDIA TITAN V (source)" in md, "the source's numbers are shown on their own"


def test_results_page_drops_stale_figures(tmp_path):
    out = tmp_path / "generated"
    (out / "results").mkdir(parents=True)
    (out / "results" / "old.png").write_bytes(b"x")
    results_page.write(tmp_path / "none", out)
    assert not (out / "results" / "old.png").exists()


@pytest.mark.parametrize("rows", [1, 7, 50])
def test_results_figures_are_readable_at_the_columns_width(rows):
    """As wide as the page's column whatever the number of rows (a wider PNG is shrunk, text and all),
    at least 4.5 inches tall, no text under 9 pt, and no two row labels or legend entries overlapping."""
    fig = results_page.KeyFigure("probes", "Thread launch rate vs block shape", "threads/cycle", None)
    lines = {gpu: {f"block {n}x{n}x1": float(n * i) for n in range(1, rows + 1)} for i, gpu in enumerate("ABC", 1)}
    drawn = results_page.figure(fig, lines)
    try:
        width, height = drawn.get_size_inches()
        assert width <= results_page.WIDTH_IN and height >= 4.5
        texts = [t for t in drawn.findobj(matplotlib.text.Text) if t.get_text() and t.get_visible()]
        assert min(t.get_fontsize() for t in texts) >= 9
        drawn.canvas.draw()
        renderer = drawn.canvas.get_renderer()
        ax = drawn.axes[0]
        for group in (ax.get_yticklabels(), drawn.legends[0].get_texts()):
            boxes = [t.get_window_extent(renderer) for t in group if t.get_text()]
            assert len(boxes) == len(group) and not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    finally:
        plt.close(drawn)


def test_source_rows_match_the_chapters_names():
    """Each source's numbers land under the same kernel/problem/metric names its chapter records."""
    for fig in results_page.key_figures():
        if fig.source:
            label, rows = fig.source()
            assert rows and fig.pick({(r["kernel"], r["problem"], r["metric"]): r for r in rows}), fig.title


def test_the_committed_results_feed_the_page():
    gpus = results.gpus()
    if not gpus:
        pytest.skip("no data/results yet")
    data = results_page.measured(results.RESULTS)
    assert any(results_page.series(f, data) for f in results_page.key_figures() if f.chapter in data)


def test_references_name_each_source_documents_author_and_address():
    """Each source document (a bold entry of book/references.md) says who wrote it and where it is, or
    that it is unsigned and has no address."""
    text = (ROOT / "book" / "references.md").read_text()
    sources = [e for e in re.split(r"\n(?=- )", text) if e.startswith("- **")]
    assert len(sources) >= 4, "the four source documents"
    for entry in sources:
        signed = re.search(r"\*\* by [\w-]+", entry) and re.search(r"<https://github\.com/[\w.-]+/[\w.-]+>", entry)
        assert signed or "unsigned" in entry and "no address" in entry, entry


# --- the repository URL: one setting, no placeholder ------------------------------------------------


def test_config_has_no_repository_until_one_is_given():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert "repository" not in config and "colab_url" not in config.get("launch_buttons", {})


def test_published_config_adds_repository_and_colab():
    config = book_config.published_config("https://github.com/someone/labbook.git/")
    assert config["repository"] == {"url": "https://github.com/someone/labbook", "branch": "main"}
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    for path in config["sphinx"]["local_extensions"].values():
        assert Path(path).is_absolute() and Path(path).is_dir()


def test_published_page_has_a_colab_button(tmp_path):
    """A notebook page rendered with the published config links to the same notebook in Colab."""
    book = tmp_path / "book"
    (book / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "01_machine.ipynb", book / "notebooks")
    (book / "_toc.yml").write_text("format: jb-book\nroot: notebooks/01_machine\n")
    config = book_config.published_config("https://github.com/someone/labbook")
    (book / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    subprocess.run(
        [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(book), "--quiet"],
        check=True,
        capture_output=True,
    )
    page = (book / "_build" / "html" / "notebooks" / "01_machine.html").read_text()
    assert "https://colab.research.google.com/github/someone/labbook/blob/main/notebooks/01_machine.ipynb" in page


@pytest.mark.parametrize("url", ["https://github.com/OWNER", "git@github.com:a/b.git", "https://gitlab.com/a/b"])
def test_published_config_rejects_what_colab_cannot_open(url):
    with pytest.raises(ValueError, match="github.com/<owner>/<name>"):
        book_config.published_config(url)


# --- Colab set-up --------------------------------------------------------------------------------------


def test_pins_come_from_requirements():
    pins = colab.pins()
    assert pins["numba-cuda"].startswith("numba-cuda[cu12]==")
    assert all(name in pins for name in colab.NEEDED.values()) and "numpy" in pins


def test_missing_names_the_pinned_requirement(monkeypatch):
    monkeypatch.setitem(colab.NEEDED, "no_such_module_here", "cupy-cuda12x")
    assert colab.pins()["cupy-cuda12x"] in colab.missing()


@pytest.fixture
def runtime(monkeypatch):
    """Every package of colab.NEEDED missing, pip intercepted: its command and constraints are recorded.
    Returns a function that makes this runtime Colab's (or not) and the list of recorded pip calls."""
    calls = []

    def pip(cmd):
        constraints = Path(cmd[cmd.index("-c") + 1]).read_text().split() if "-c" in cmd else []
        calls.append((cmd, constraints))

    monkeypatch.setattr(colab.subprocess, "check_call", pip)
    monkeypatch.setattr(colab, "_installed", lambda module: False)

    def on(colab_runtime: bool):
        monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
        if colab_runtime:
            monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20260101-060000_RC00")
        return calls

    return on


def test_on_colab_by_its_environment_or_its_module(runtime, monkeypatch):
    runtime(False)
    assert not colab.on_colab()
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert colab.on_colab()
    runtime(True)
    assert colab.on_colab()


def test_setup_installs_nothing_off_colab(runtime, capsys):
    calls = runtime(False)
    assert colab.setup() == device.MODE
    out = capsys.readouterr().out
    assert calls == [] and out.count("\n") == 1 and out.startswith("Set-up: a local checkout; missing ")
    assert all(colab.pins()[name] in out for name in colab.NEEDED.values())


def test_setup_on_colab_installs_the_pins_into_this_interpreter(runtime, capsys):
    calls = runtime(True)
    assert colab.setup() == device.MODE
    ((cmd, constraints),) = calls
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
    specs = cmd[cmd.index("-c") + 2 :]
    requirements = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert specs and all("==" in spec and spec in requirements for spec in specs)
    assert {spec.split("[")[0].split("==")[0] for spec in specs} == set(colab.NEEDED.values())
    # every dependency requirements.txt pins is held to its pin (constraints take no extras)
    pinned = {spec.split("[")[0].split("==")[0]: spec.split("==")[1] for spec in requirements if spec}
    assert sorted(constraints) == sorted(f"{name}=={version}" for name, version in pinned.items())
    assert f"Set-up: Colab; installed {', '.join(specs)}; mode {device.MODE}." in capsys.readouterr().out


def test_setup_on_colab_asks_for_a_restart_when_numpy_changed(runtime, monkeypatch, capsys):
    runtime(True)
    monkeypatch.setattr(colab.importlib.metadata, "version", lambda name: "0.0.1")  # pip put another NumPy on disk
    colab.setup()
    assert "NumPy was already loaded: restart the runtime" in capsys.readouterr().out


def test_setup_on_colab_with_everything_installed(runtime, monkeypatch, capsys):
    calls = runtime(True)
    monkeypatch.setattr(colab, "missing", lambda: [])
    colab.setup()
    assert calls == [] and "Set-up: Colab; nothing to install" in capsys.readouterr().out


# --- the course pages ------------------------------------------------------------------------------------


def notebook_labels() -> set:
    labels = set()
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        labels |= set(re.findall(r":label: ([\w-]+)", nb.read_text()))
    return labels


# How each page names exercises: the syllabus with {ref} links; the teachers' page in its grading
# commands (exercise.check("<label>", ...) and `exercise check <label>`).
EXERCISE_NAMES = {"syllabus": r"\{ref\}`([\w-]+)`", "teachers": r"exercise(?:\.check\(\"| check )([\w-]+)"}


@pytest.mark.parametrize("page", list(EXERCISE_NAMES))
def test_course_pages_name_existing_exercises(page):
    text = (ROOT / "book" / f"{page}.md").read_text()
    names = set(re.findall(EXERCISE_NAMES[page], text))
    assert names, f"book/{page}.md names no exercise: its pattern {EXERCISE_NAMES[page]!r} finds nothing"
    assert names <= notebook_labels(), f"unknown exercise labels: {sorted(names - notebook_labels())}"


def test_auto_checked_exercises_are_the_registered_ones():
    from kernels.harness import exercise

    text = (ROOT / "book" / "syllabus.md").read_text()
    claimed = set(re.findall(r"\{ref\}`([\w-]+)` \(auto-checked\)", text))
    assert claimed and claimed <= {ex.label for ex in exercise.all_exercises()}
    unmarked = {ex.label for ex in exercise.all_exercises()} - claimed
    assert not unmarked, f"registered but not marked (auto-checked) in the syllabus: {sorted(unmarked)}"


def test_the_syllabus_places_every_exercise():
    text = (ROOT / "book" / "syllabus.md").read_text()
    missing = notebook_labels() - set(re.findall(r"\{ref\}`([\w-]+)`", text))
    assert not missing, f"exercises no lab session of the syllabus names: {sorted(missing)}"


@pytest.mark.parametrize("page", ["teachers", "rerun", "contribute"])
def test_course_pages_python_snippets_parse(page):
    """A snippet a teacher pastes into a chapter must stay plain Python: the notebook tests parse every
    code cell with ast, so IPython magics (``!git``, ``%cd``) would break them."""
    text = (ROOT / "book" / f"{page}.md").read_text()
    for block in re.findall(r"```i?python\n(.*?)```", text, flags=re.S):
        ast.parse(textwrap.dedent(block))


def minutes_tables(text: str) -> list[tuple[str, list[int], int]]:
    """Every activity table of the syllabus: (the session heading above it, its minutes, its total)."""
    tables = []
    for section in re.split(r"\n(?=## )", text):
        heading = section.splitlines()[0]
        for body in re.findall(r"\| Activity \| Minutes \|\n\| --- \| ---: \|\n((?:\|.*\n)+)", section + "\n"):
            rows = [line.rsplit("|", 2)[1].strip() for line in body.splitlines()]
            total = rows.pop()
            assert re.fullmatch(r"\*\*\d+\*\*", total), f"{heading}: the table's last row is not its bold total"
            tables.append((heading, [int(m) for m in rows], int(total.strip("*"))))
    return tables


def test_each_sessions_minutes_add_up_to_its_slot():
    text = (ROOT / "book" / "syllabus.md").read_text()
    slot = int(re.search(r"\*\*Each session\s+is a (\d+)-minute slot\*\*", text).group(1))
    tables = minutes_tables(text)
    sessions = re.findall(r"^## (\d+)\. ", text, flags=re.M)
    assert sessions == [str(i) for i in range(1, 10)]
    assert {h.split(".")[0][3:] for h, _, _ in tables} == set(sessions), "a session without a minutes table"
    for heading, minutes, total in tables:
        assert sum(minutes) == total, f"{heading}: the activities add up to {sum(minutes)}, the total says {total}"
        assert total == slot, f"{heading}: {total} minutes in a {slot}-minute slot"


def test_gpu_seconds_are_the_chapters_times_in_the_run_the_book_shows():
    """Each session's seconds are the papermill times of its chapters' notebooks (deep-dive pages left out)
    as the committed H100 run recorded them, so a rerun that changes them shows here."""
    import rerun

    text = (ROOT / "book" / "syllabus.md").read_text()
    rows = re.findall(r"^\| (\d[^|]*?) \| (\d+) \| \d+ \| \d+ \|$", text, flags=re.M)
    assert len(rows) == 10, rows
    for session, seconds in rows:
        chapters = re.findall(r"`(\w+)`", session)
        assert chapters, f"{session}: name the chapters it runs"
        notebooks = [p for c in chapters for p in rerun.chapter_notebooks(c) if "_deep_" not in p.stem]
        took = sum(json.loads(p.read_text())["metadata"]["papermill"]["duration"] for p in notebooks)
        assert int(seconds) == round(took), f"{session}: {seconds} s, but its notebooks took {round(took)} s"


def test_gpu_budget_follows_from_the_measured_reruns():
    """The budget is five times the longest `make rerun` on the H100, rounded up to whole minutes; one
    GPU serves for timing as many students as that budget fits in 90 minutes (the page says both)."""
    text = (ROOT / "book" / "syllabus.md").read_text()
    assert "five times the longest run, rounded up" in text and "90 divided by the budget, rounded down" in text
    rows = re.findall(r"^\| (\d.*?) \| (\d+)(?:-(\d+))? \| (\d+) \| (\d+) \|$", text, flags=re.M)
    assert len(rows) == 10, rows
    for session, low, high, budget, students in rows:
        longest = int(high or low)
        assert int(budget) == -(-5 * longest // 60), f"{session}: budget {budget} for {longest} s"
        assert int(students) == 90 // int(budget), f"{session}: {students} students for {budget} minutes"


# --- the sections the course pages name ---------------------------------------------------------------------

FENCE = re.compile(r"\s*(`{3,}|:{3,})")
# A link to a section: [text](/notebooks/<name>.ipynb#<anchor>) or [text](<page>.md#<anchor>)
SECTION_LINK = re.compile(r"\]\((/notebooks/[\w-]+\.ipynb|[\w-]+\.md)#([^)\s]+)\)")


def heading_slugs(markdown_blocks: list[str]) -> set[str]:
    """The anchors MyST gives a page's headings of levels 1 to 3 (``myst_heading_anchors`` in _config.yml):
    the heading's text without math, lower case, spaces as '-', other punctuation dropped; a repeat
    gets -1, -2, ..."""
    slugs: list[str] = []
    for block in markdown_blocks:
        fenced = False
        for line in block.splitlines():
            if FENCE.match(line):
                fenced = not fenced
            elif not fenced and (m := re.match(r"#{1,3} (.+)", line)):
                text = re.sub(r"\$[^$]*\$", "", m.group(1).strip()).replace("`", "")
                slug = base = re.sub(r"[^\w\- ]", "", text.lower().replace(" ", "-"))
                i = 1
                while slug in slugs:
                    slug, i = f"{base}-{i}", i + 1
                slugs.append(slug)
    return set(slugs)


def page_slugs(target: str) -> set[str]:
    """The section anchors of a notebook (/notebooks/<name>.ipynb) or of a book page (<page>.md)."""
    if target.endswith(".ipynb"):
        cells = json.loads((ROOT / target.lstrip("/")).read_text())["cells"]
        return heading_slugs(["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"])
    return heading_slugs([(ROOT / "book" / target).read_text()])


def test_heading_slugs_follow_myst():
    text = "# A title\n## Step 4: a `cp.async` pipeline\n```\n# not a heading\n```\n"
    text += "## REGISTER TILING: $8 \\times 8$ outputs\n"
    assert heading_slugs([text, "### A title"]) == {
        "a-title",
        "step-4-a-cpasync-pipeline",
        "register-tiling--outputs",
        "a-title-1",
    }


@pytest.mark.parametrize("page", ["syllabus", "teachers"])
def test_course_pages_link_sections_that_exist(page):
    """Every section the page links to is a heading of that notebook or page (the build checks the same)."""
    links = SECTION_LINK.findall((ROOT / "book" / f"{page}.md").read_text())
    assert links or page == "teachers"
    missing = sorted(f"{target}#{anchor}" for target, anchor in links if anchor not in page_slugs(target))
    assert not missing, f"book/{page}.md links to sections that do not exist: {missing}"


def test_every_activity_names_its_sections():
    """Each activity of the syllabus, but for set-up, break and wrap-up, links the sections it reads or
    names the exercise it does: a section named only in words could be one no chapter has."""
    text = (ROOT / "book" / "syllabus.md").read_text()
    unnamed = []
    for section in re.split(r"\n(?=## )", text):
        for body in re.findall(r"\| Activity \| Minutes \|\n\| --- \| ---: \|\n((?:\|.*\n)+)", section + "\n"):
            for row in body.splitlines():
                activity = row.strip("|").rsplit("|", 1)[0].strip()
                if re.match(r"(Set-up|Break|Wrap-up|\*\*Total)", activity):
                    continue
                if not SECTION_LINK.search(activity) and not re.search(r"\{ref\}`[\w-]+`", activity):
                    unnamed.append(f"{section.splitlines()[0]}: {activity}")
    assert not unnamed, f"activities that link no section: {unnamed}"


def test_the_implicit_gemm_session_covers_every_step():
    """Session 9 reads every step of the chapter, the last ones (those that reach cuDNN) included."""
    from kernels.igemm import common as ig

    text = (ROOT / "book" / "syllabus.md").read_text()
    session = text.split("## 9. ", 1)[1].split("\n## ", 1)[0]
    linked = {anchor for target, anchor in SECTION_LINK.findall(session) if target.endswith("05_implicit_gemm.ipynb")}
    steps = {int(m.group(1)) for a in linked if (m := re.match(r"step-(\d+)-", a))}
    assert steps == {s.number for s in ig.REGISTRY}, f"session 9 links steps {sorted(steps)}"


@pytest.mark.parametrize("output", ["_config.yml", "_toc.yml", "./book/../_config.yml"])
def test_the_published_config_never_writes_over_a_committed_file(output, capsys):
    path = ROOT / output
    before = path.read_bytes()
    with pytest.raises(SystemExit) as exit_:
        book_config.main(["https://github.com/someone/labbook", str(path)])
    assert exit_.value.code == 2 and "is a committed file" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_the_published_config_goes_where_it_is_asked(tmp_path):
    assert book_config.main(["https://github.com/someone/labbook", str(tmp_path / "out" / "_config.yml")]) == 0
    assert yaml.safe_load((tmp_path / "out" / "_config.yml").read_text())["repository"]["branch"] == "main"

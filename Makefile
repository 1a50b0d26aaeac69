# One command each; every target creates and fills .venv itself on first use.
# On a machine without network (the lab's GPU box) pass PYTHON=python3 to skip the venv.
.DEFAULT_GOAL := help
VENV := .venv
ifeq ($(origin PYTHON), undefined)
PYTHON := $(VENV)/bin/python
SETUP := $(VENV)/.installed
else
SETUP :=
endif
BOOK_HTML := _build/html
CHAPTER ?=
UPDATE ?= 0
FORCE ?= 0

# A chapter's deep-dive pages (NN_<chapter>_deep_<topic>) rerun with it: scripts/rerun.py picks them up.
# In the order rerun-all runs them: the machine and the probes first, since later chapters quote the
# copy rate, latencies and clocks they measure (kernels/harness/quantities.py) from this GPU's rows.
MEASURED_FIRST = machine probes_compute probes_memory
CHAPTERS = $(MEASURED_FIRST) $(filter-out $(MEASURED_FIRST),$(shell ls notebooks/*.ipynb | grep -v _deep_ | sed -E 's|notebooks/[0-9]+[a-z]?_||; s|\.ipynb||'))

.PHONY: help book test gpu-test rerun rerun-all rerun-book print-chapters clean book-check lab

help:
	@echo "make lab                  JupyterLab on the notebooks, kernels in the CUDA simulator (no GPU needed)"
	@echo "make book                 build the HTML book from the notebooks' stored outputs"
	@echo "                          (RESULTS_FROM=<gpu>: from that GPU's rerun in build/rerun/<gpu>/)"
	@echo "make test                 everything CI proves on a CPU (simulator, compiles, notebooks, book)"
	@echo "make gpu-test             the tests marked gpu, on this machine's GPU (PART=k/n: every n-th from the k-th;"
	@echo "                          the ledger counts a source verified once all n parts passed at its bytes)"
	@echo "make book-check           the built book in headless Chromium (needs chromium: .ci/run installs it in CI)"
	@echo "make rerun CHAPTER=name   re-execute one chapter on this GPU (UPDATE=1 refreshes the committed notebook;"
	@echo "                          on a GPU other than the reference one, UPDATE=1 FORCE=1);"
	@echo "                          a notebook's name (CHAPTER=03_conv) reruns that page alone"
	@echo "make rerun-all            every chapter, in turn ($(CHAPTERS))"
	@echo "make rerun-book           the whole book in one sitting: the variants precompiled on every core, then every"
	@echo "                          notebook in rerun-all's order, past a failure, each one's time and the total"
	@echo "                          (UPDATE=1 [FORCE=1] as for rerun; ONLY=nb1,nb2; SKIP_DONE=1 resumes a run cut short)"
	@echo "make student              build/student(.zip): the repository with the notebooks' solutions removed"

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	$(VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

# BOOK_REPOSITORY_URL (e.g. https://github.com/you/gpu-kernel-labbook), once the book is published:
# the Colab launch buttons and the repository link, through build/_config.yml (book/teachers.md).
BOOK_REPOSITORY_URL ?=
BOOK_CONFIG := $(if $(BOOK_REPOSITORY_URL),--config build/_config.yml,)
MATHJAX_JS := build/mathjax/package/es5/tex-mml-chtml.js

# RESULTS_FROM=<gpu-slug>: the book as that GPU's rerun (build/rerun/<gpu>/) writes it, in build/book-<gpu>/.
RESULTS_FROM ?=
BOOK_SRC := $(if $(RESULTS_FROM),build/book-$(RESULTS_FROM),.)

book: $(SETUP) $(MATHJAX_JS)
	rm -rf _build
	$(PYTHON) scripts/results_page.py
	$(if $(BOOK_REPOSITORY_URL),$(PYTHON) scripts/book_config.py "$(BOOK_REPOSITORY_URL)" build/_config.yml,)
	$(if $(RESULTS_FROM),$(PYTHON) scripts/book_from.py $(RESULTS_FROM),)
	$(PYTHON) -c "from jupyter_book.cli.main import main; main()" build $(BOOK_SRC) $(BOOK_CONFIG) --warningiserror --nitpick --keep-going --quiet
	@echo "The book is at $(CURDIR)/$(BOOK_SRC)/_build/html/index.html"

test: $(SETUP) book
	NUMBA_ENABLE_CUDASIM=1 BOOK_REQUIRE_HTML=1 BOOK_REQUIRE_BROWSER=$(if $(CI),1,) $(PYTHON) -m pytest -q -ra tests notebooks \
	  --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=900

gpu-test: $(SETUP)
	GPU_VERDICTS=tests/gpu_verdicts.json GPU_PART=$(PART) $(PYTHON) -m pytest -q -ra --durations=10 -m gpu tests

rerun: $(SETUP)
	@test -n "$(CHAPTER)" || (echo "usage: make rerun CHAPTER=<name>, e.g. CHAPTER=machine" && exit 2)
	$(PYTHON) scripts/rerun.py $(CHAPTER) $(if $(filter 1,$(UPDATE)),--update,) $(if $(filter 1,$(FORCE)),--force-update,)

rerun-all: $(SETUP)
	@for c in $(CHAPTERS); do $(MAKE) --no-print-directory rerun CHAPTER=$$c || exit 1; done

# The notebooks in JupyterLab with Numba's CUDA simulator on, the first thing to try without a GPU: its
# kernels inherit NUMBA_ENABLE_CUDASIM=1 from the server (on a GPU, .venv/bin/jupyter lab runs them there).
# As root (a container's usual user) JupyterLab refuses to start unless told.
lab: $(SETUP)
	NUMBA_ENABLE_CUDASIM=1 $(PYTHON) -m jupyterlab $(if $(filter 0,$(shell id -u)),--allow-root,) notebooks/00_first_kernels.ipynb

ONLY ?=
SKIP_DONE ?= 0
rerun-book: $(SETUP)
	$(PYTHON) scripts/rerun_book.py $(if $(filter 1,$(UPDATE)),--update,) $(if $(filter 1,$(FORCE)),--force-update,) \
	  $(if $(ONLY),--only $(ONLY),) $(if $(filter 1,$(SKIP_DONE)),--skip-done,)

# The chapters in rerun-all's order, for scripts/rerun_book.py.
print-chapters:
	@echo $(CHAPTERS)

clean:
	rm -rf _build build book/_generated

# The MathJax release the pages load from the book itself (book/_ext/book_fixes.py copies what they
# need into _static), so math renders offline. npm fetches it: a prerequisite of `make book`.
$(MATHJAX_JS):
	@command -v npm >/dev/null 2>&1 || { echo "make book needs npm, to fetch MathJax (Debian: apt-get install npm)"; exit 1; }
	mkdir -p build/mathjax
	cd build/mathjax && npm pack --silent mathjax@3.2.2 >/dev/null && tar xzf mathjax-3.2.2.tgz

# The browser check alone (tests/test_browser.py, also part of `make test`, which skips it without
# Chromium unless CI is set; .ci/run installs Chromium).
book-check: $(SETUP) book
	BOOK_REQUIRE_BROWSER=1 $(PYTHON) -m pytest -q -ra tests/test_browser.py

# The student edition: the repository with every notebook's solutions removed (book/teachers.md).
.PHONY: student
student: $(SETUP)
	$(PYTHON) scripts/student_edition.py

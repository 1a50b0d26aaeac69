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

CHAPTERS = $(shell ls notebooks/*.ipynb | sed -E 's|notebooks/[0-9]+[a-z]?_||; s|\.ipynb||')

.PHONY: help book test gpu-test rerun rerun-all clean

help:
	@echo "make book                 build the HTML book from the notebooks' stored outputs"
	@echo "make test                 everything CI proves on a CPU (simulator, compiles, notebooks, book)"
	@echo "make gpu-test             the tests marked gpu, on this machine's GPU"
	@echo "make rerun CHAPTER=name   re-execute one chapter on this GPU (UPDATE=1 refreshes the committed notebook)"
	@echo "make rerun-all            every chapter, in turn ($(CHAPTERS))"

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -r requirements.txt
	$(VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

book: $(SETUP)
	rm -rf _build
	$(PYTHON) -c "from jupyter_book.cli.main import main; main()" build . --warningiserror --nitpick --keep-going --quiet
	@echo "The book is at $(CURDIR)/$(BOOK_HTML)/index.html"

test: $(SETUP) book
	NUMBA_ENABLE_CUDASIM=1 BOOK_REQUIRE_HTML=1 $(PYTHON) -m pytest -q -ra tests notebooks \
	  --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=900

gpu-test: $(SETUP)
	BOOK_MODE=gpu $(PYTHON) -m pytest -q -ra -m gpu tests

rerun: $(SETUP)
	@test -n "$(CHAPTER)" || (echo "usage: make rerun CHAPTER=<name>, e.g. CHAPTER=machine" && exit 2)
	BOOK_MODE=gpu $(PYTHON) scripts/rerun.py $(CHAPTER) $(if $(filter 1,$(UPDATE)),--update,)

rerun-all: $(SETUP)
	@for c in $(CHAPTERS); do $(MAKE) --no-print-directory rerun CHAPTER=$$c || exit 1; done

clean:
	rm -rf _build build

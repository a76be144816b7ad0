# bildlib: `make fig4` runs the main job, `make test` the tests, `make lab` opens JupyterLab. Each
# creates .venv first if needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.bildlib-installed
# Triton (extra `cuda`) has Linux wheels only; on Linux it also runs the kernel tests on CPU.
# Ray (extra `cluster`) runs sweeps on a cluster; the tests start a local instance.
# CTranslate2 (extra `peers`) is make bench's peer engine (docs/engines-cpu.md).
EXTRAS ?= $(if $(filter Linux,$(shell uname -s)),dev$(comma)cuda$(comma)cluster$(comma)peers,dev$(comma)cluster$(comma)peers)
comma := ,
# On this project's machines Multi30k sits in ../shared/data (see docs/data-and-models.md).
SHARED_DATA := $(abspath ../shared/data)
export BILD_DATA_DIR ?= $(if $(wildcard $(SHARED_DATA)/multi30k/val.de.gz),$(SHARED_DATA))
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup lab test test-e2e test-lab lint release course grade fig4 fig4-authors fig4-int8 figures figures-full headline report bench bench-ct2 ct2 bench-grid bench-batch gpu-check tutorial paper-dryrun reproduce tokenizer models models-ee models-student models-candidates small-models small-models-mixed pet figures-ee models-lm figures-lm figures-lm-student quantized quantized-bench exactness test-cpus cards clean-venv

setup: $(STAMP)

# constraints.txt holds the exact versions the tests ran with; pyproject.toml only ranges.
# nbstripout's flags: keep the cells' ids, and drop what Lab writes about the Python it ran (the
# committed notebooks are fixed points of this filter: tests/test_notebooks.py)
NBSTRIP := --keep-id --extra-keys 'metadata.language_info.version metadata.language_info.codemirror_mode metadata.language_info.file_extension metadata.language_info.mimetype metadata.language_info.nbconvert_exporter metadata.language_info.pygments_lexer'
# It also installs a Jupyter kernel for this checkout, named after its path: "bildlib (<path>)"
# (a Jupyter started outside the venv can run the notebooks with it; a second checkout installs
# its own and leaves this one's alone) and, in a git checkout, nbstripout as the repo's git filter:
# a notebook saved in JupyterLab with its outputs still shows as unchanged (docs/teaching.md).
KERNEL_NAME := bildlib-$(shell printf '%s' '$(CURDIR)' | sha256sum | cut -c1-10)
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e '.[$(EXTRAS)]' -c constraints.txt
	$(BIN)/python -m ipykernel install --user --name $(KERNEL_NAME) --display-name "bildlib ($(CURDIR))"
	@# git's stat data first, while no filter is set: in a fresh clone every file is racily clean
	@# (written in the second the index was), and the first `git status` (a checks file's code
	@# state runs one) would run nbstripout on each notebook, about 30 s on the Intel Xeon
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	  git update-index -q --refresh >/dev/null || true; \
	  $(BIN)/nbstripout --install --attributes "$$(git rev-parse --git-path info/attributes)" && \
	  git config filter.nbstripout.clean "$(abspath $(BIN))/python -m nbstripout $(NBSTRIP)" && \
	  git config diff.ipynb.textconv "$(abspath $(BIN))/python -m nbstripout -t $(NBSTRIP)"; fi
	@touch $@

# JupyterLab from the venv, on the checkout, the tutorial open (README, "Start here"); it saves the
# notebooks of notebooks/ without outputs (bildlib.notebook.jupyter). The data is found without BILD_DATA_DIR:
# val and the test splits ship in data/multi30k/.
LAB_ARGS ?=
lab: $(STAMP)
	$(BIN)/python -m bildlib.notebook.jupyter $(LAB_ARGS) notebooks/tutorial.ipynb

lint: $(STAMP)
	$(BIN)/ruff check .

# pytest exits non-zero on any failure and with 5 when it collected no test: both fail `make`.
# make test leaves out the long end-to-end runs (marker e2e), each of which has a faster path in it;
# make test-e2e runs those (the paper presets' covering dry run, full-depth mT5-large and T5-large steps).
# It runs the files side by side on the machine's CPUs (pytest-xdist: at most 4 processes, each
# file whole in one of them, so a module's fixtures are built once); tests/conftest.py gives each
# process its share of the CPUs as torch threads. 2 CPUs: 866 tests in about 9 min, against 15
# one at a time (AMD EPYC, 2026-12-02). TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n > 4 ? 4 : n )))
test: lint
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile -m "not e2e"

test-e2e: $(STAMP)
	$(BIN)/pytest -m e2e

# The tutorial in JupyterLab in a real browser (tests/lab_check.py: Debian's chromium through
# Playwright), Run All Cells and Save; screenshots in build/lab/. CI runs it after make test.
test-lab: $(STAMP)
	$(BIN)/python tests/lab_check.py
	$(BIN)/python tests/report_check.py

# Notebooks run with papermill; executed copies go to build/notebooks (git-ignored). Only these
# targets write figures/, and only with the notebooks' default parameters (TO_FIGURES); a notebook run
# in Jupyter or by papermill writes to build/figures/<notebook>/, as a target given PRESET or DEVICE
# does. Sweeps are cached in data/results, keyed by their members: fig10, fig8 and latency_scatter
# reuse fig4's sweep.
NOTEBOOKS := fig4 fig2 fig5 fig9 fig10 latency_scatter table3 table5 fig8 peers
# A paper preset on a GPU: make figures PRESET=cnndm-t5 DEVICE=cuda (prints bildlib.experiments.preflight's projection first).
PRESET ?=
DEVICE ?=
PM_ARGS += $(if $(PRESET),-p preset $(PRESET)) $(if $(DEVICE),-p device $(DEVICE))
TO_FIGURES = $(if $(PRESET)$(DEVICE),,-p out_dir figures)
# Every notebook run has a per-cell limit (papermill's --execution-timeout, seconds): a hang fails,
# naming the cell. The longest cells (make bench's sweep, about 45 min here) fit well inside it.
NB_TIMEOUT ?= 10800
# BILD_PUBLISH=1 marks a make target's run: a notebook writes figures/ only in one (bildlib.notebook).
# --log-output relays what the notebook prints to this terminal, and BILD_PROGRESS=text makes a sweep's
# progress bar (configurations x examples, with its ETA) lines of text papermill can relay, one every
# BILD_PROGRESS_EVERY seconds (15; bildlib.experiments.progress): the terminal shows the sweep, not
# just papermill's cell counter.
RUN_NOTEBOOK = BILD_PUBLISH=1 BILD_PROGRESS=text $(BIN)/papermill --cwd . --log-output --execution-timeout $(NB_TIMEOUT)
PAPERMILL = $(RUN_NOTEBOOK) $(TO_FIGURES) $(PM_ARGS)
# make fig4 is a newcomer's first run: into build/figures/fig4/, so the checkout stays as cloned.
# make fig4 PUBLISH=1 (and make figures) rewrite the committed figures/fig4.png and table1.csv.
PUBLISH ?=
fig4: $(STAMP)
	@mkdir -p build/notebooks
	$(RUN_NOTEBOOK) $(if $(PUBLISH),$(TO_FIGURES)) $(PM_ARGS) notebooks/fig4.ipynb build/notebooks/fig4.ipynb

figures: $(STAMP)
	@mkdir -p build/notebooks
	$(BIN)/python -m bildlib.experiments.preflight --preset $(or $(PRESET),multi30k) --device $(or $(DEVICE),cpu)
	@for nb in $(NOTEBOOKS); do \
	  $(PAPERMILL) notebooks/$$nb.ipynb build/notebooks/$$nb.ipynb || exit 1; done
	$(FIG4_AUTHORS)

# Fig. 4 and Table 1 under the authors' rules (decoding.bild rules="authors"): figures/authors/.
AUTHORS_OUT ?= figures/authors
FIG4_AUTHORS = $(PAPERMILL) -p rules authors -p out_dir $(AUTHORS_OUT) notebooks/fig4.ipynb build/notebooks/fig4-authors.ipynb
fig4-authors: $(STAMP)
	@mkdir -p build/notebooks
	$(FIG4_AUTHORS)

# Fig. 4's sweep (the first 100 val sentences) over the int8 pair (dtype int8: the native engine's
# int8 products) and, on the same machine, over float32 (the dtype the int8 weights come from): two
# frontiers side by side, each against its own vanilla large (docs/quantization.md). About 15 min on
# 2 CPU cores.
INT8_OUT ?= figures/int8
fig4-int8: $(STAMP)
	@mkdir -p build/notebooks
	for d in int8 float32; do $(PAPERMILL) -p dtype $$d -p engine native -p out_dir $(INT8_OUT)/fig4-$$d \
	  notebooks/fig4.ipynb build/notebooks/fig4-$$d.ipynb || exit 1; done

# All of Multi30k val (1,014 sentences) instead of the default first 100.
figures-full: PM_ARGS = -p n_examples 1014 -p out_dir figures/full
figures-full: AUTHORS_OUT = figures/full/authors
figures-full: figures

# README's headline: Table 1 on all of Multi30k val (1,014 sentences) on a reduced grid, with and
# without verify_end, into figures/full/ (about 25 min on 2 CPU cores). α_FB 0.5 is where the student
# was fastest within 0.5 BLEU in its own study (docs/results.md, Students).
HEADLINE_GRID ?= -y '{fallbacks: [0.4, 0.5, 0.6, 0.8], rollbacks: [1.0], verify_end: [false, true]}'
headline: $(STAMP)
	@mkdir -p build/notebooks
	$(PAPERMILL) -p n_examples 1014 -p out_dir figures/full $(HEADLINE_GRID) \
	  notebooks/fig4.ipynb build/notebooks/fig4-full.ipynb

# The course tutorial (docs/teaching.md) with every exercise filled in by its solution: the nbgrader
# source notebook (make course) run into figures/ (the trace picture, the sweep and
# tutorial_checks.json; under 2 min on 2 CPU cores).
tutorial: course
	@mkdir -p build/notebooks
	$(PAPERMILL) -p out_dir figures $(COURSE)/source/tutorial/tutorial.ipynb build/notebooks/tutorial.ipynb

# The tutorial as an nbgrader course in build/course (docs/teaching.md): source/ with the solutions
# (course/solutions.py), locked cells and hidden tests; release/ for students. Then
# make grade SUBMISSIONS=folder (one folder per student) autogrades with TIMEOUT s per cell,
# writes HTML feedback and build/course/grades.csv.
COURSE ?= build/course
TIMEOUT ?= 300
course: $(STAMP)
	$(BIN)/python -m bildlib.notebook.tutorial.course build --out $(COURSE) --timeout $(TIMEOUT)

grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "make grade SUBMISSIONS=folder: one folder per student, each with its notebook"; exit 2; }
	$(BIN)/python -m bildlib.notebook.tutorial.autograde $(SUBMISSIONS) --out $(COURSE) --timeout $(TIMEOUT)

# The paper presets offline (docs/paper-checkpoints.md): every paper preset through every notebook that
# takes it, on random models of the checkpoints' shapes and datasets in the hub's schema, n = 2, CPU,
# into build/dryrun/ (dryrun.csv lists every run; tests/test_paper.py runs its covering subset, --covering).
paper-dryrun: $(STAMP)
	$(BIN)/python -m bildlib.experiments.paper.dryrun

# The paper's tables on its checkpoints, with its numbers beside them (docs/paper-checkpoints.md): the
# plan first, then fig4, fig2, fig5, fig8, table3 and table5 per preset (for GPT-2: gpt2 and gpt2-large
# fine-tuned on WikiText-2 for 5 epochs as arXiv v1 did, bildlib.train.gpt2, then table2_lm on 512-token
# chunks at v1's α_FB grid; PRESETS=wikitext2-gpt2 DEVICE=cuda: gpt2-large is 774 M parameters), resumable, into
# build/reproduction/ with report.md and report.html. PRESETS: empty, every paper preset; N: 0, all of
# validation; DRY=1: offline, on the dry run's random models (FAST=1: with its small grids).
# DEVICE: the notebooks' device, auto where empty (DEVICE is also make figures', empty by default).
PRESETS ?=
N ?= 0
reproduce: $(STAMP)
	$(BIN)/python -m bildlib.experiments.paper.reproduce --device $(or $(DEVICE),auto) --n $(N) \
	  $(if $(PRESETS),--presets $(PRESETS)) $(if $(DRY),--dry) $(if $(FAST),--fast)

# One release: every committed figure and table from one code state, in the default dtype, then
# make report. It refuses uncommitted changes to bildlib/, kernels/ or notebooks/ (each checks file
# records the code state it ran from, notebook.code_state). Sweeps are cached in data/results, so an
# interrupted release resumes where it stopped: a target listed in figures/release_times.csv at this
# code state is not run again. That file gets each target's minutes on this machine and how many
# results it computed (bildlib.reports.release; README's release line comes from it). The models it
# needs: make models-lm, models-candidates, and models-ee (figures-ee, last: its models are not shipped).
# make -n release: the loop's makes only print, and nothing is recorded (PRINT_ONLY; not make
# reproduce's DRY). (No comment on PRINT_ONLY's own line: the spaces before it would make it non-empty.)
PRINT_ONLY = $(findstring n,$(firstword -$(MAKEFLAGS)))
REL = $(BIN)/python -m bildlib.reports.release
RELEASE := figures headline bench figures-lm figures-lm-student small-models small-models-mixed pet \
  bench-batch tutorial figures-ee
release: $(STAMP)
	@git diff --quiet HEAD -- bildlib kernels notebooks || { \
	  echo "make release: commit bildlib/, kernels/ and notebooks/ first: a release runs from one code state"; exit 2; }
	@for t in $(RELEASE); do \
	  if $(REL) done $$t; then echo "== $$t: recorded at this code state"; continue; fi; \
	  s=$$(date +%s); n=$$($(REL) count); $(MAKE) --no-print-directory $$t || exit 1; \
	  $(if $(PRINT_ONLY),:,$(REL) record $$t $$(( $$(date +%s) - s )) $$n) || exit 1; done
	$(MAKE) --no-print-directory report

# README's result blocks from the committed CSVs and JSON (bildlib.reports.readme; a test checks them).
report: $(STAMP)
	$(BIN)/python -m bildlib.reports
	$(BIN)/python -m bildlib.reports.toc

# The benchmark bars (docs/engines.md): the peers notebook, BiLD against transformers' generate and
# assisted generation in one interleaved run, over all of Multi30k val (1,014 sentences), once in
# each dtype: the default (auto: bf16 on a CPU with native bf16) into figures/peers/val/, float32
# into figures/peers/val-float32/ (about 20 min each on 2 CPU cores). PEERS_ARGS is the grid; the
# committed runs used this default; PEERS_ARGS= runs the notebook's full grid.
# Each run also times CTranslate2's greedy decoding of the large checkpoint (converted by make ct2
# into build/ct2/), in a process of its own, alternated with ours, into ct2.csv (bildlib.bench.ct2peer).
PEERS_ARGS ?= -y '{fallbacks: [0.3, 0.4, 0.5], rollbacks: [1.0], assisted: [[8, 0.4]], verify_below: [0.8, 0.9]}'
PEERS_OUT ?= figures/peers/val
bench: ct2
	@mkdir -p build/notebooks
	$(PAPERMILL) -p n_examples 1014 -p dtype auto -p ctranslate2 True -p out_dir $(PEERS_OUT) $(PEERS_ARGS) \
	  notebooks/peers.ipynb build/notebooks/bench.ipynb
	$(PAPERMILL) -p n_examples 1014 -p dtype float32 -p ctranslate2 True -p out_dir $(PEERS_OUT)-float32 \
	  $(PEERS_ARGS) notebooks/peers.ipynb build/notebooks/bench-float32.ipynb

# CTranslate2 against vanilla large and the committed peers tables' BiLD rows again, on this machine,
# without the sweep (bildlib.bench.peers ct2_again): CTranslate2 at float32 and int8, each at 1 and 2
# threads, bildlib at its fastest thread count; the ct2.csv and ct2_checks.json of both make bench
# folders, and of figures/peers/val-int8 (dtype int8: the default run's rows on the native engine's
# int8 products). About 20 min each on 2 CPU cores.
bench-ct2: ct2
	$(BIN)/python -m bildlib.bench.peers $(PEERS_OUT) --dtype auto
	$(BIN)/python -m bildlib.bench.peers $(PEERS_OUT)-float32 --dtype float32
	$(BIN)/python -m bildlib.bench.peers $(PEERS_OUT)-int8 --dtype int8 --picks $(PEERS_OUT)

# The shipped large checkpoint converted for CTranslate2 (lossless float32) into build/ct2/.
ct2: $(STAMP)
	$(BIN)/python -m bildlib.bench.ct2peer convert data/checkpoints/multi30k-large

# fig4's sweep over all of val on another grid, into build/figures/bench/ (the earlier runs made this way,
# before the lean engine, are in git: git show 762cfe5:docs/history.md).
BENCH_GRID ?= -y '{fallbacks: [0.3, 0.4, 0.5], rollbacks: [0.5, 1.0]}'
BENCH_OUT ?= build/figures/bench
bench-grid: $(STAMP)
	@mkdir -p build/notebooks
	$(PAPERMILL) -p n_examples 1014 -p out_dir $(BENCH_OUT) $(BENCH_GRID) \
	  notebooks/fig4.ipynb build/notebooks/bench-grid.ipynb

# Batch > 1 (docs/batching.md): every row of all of val at batch 8 against the batch-1 decoders
# (float32), then sentences per second at batch 1-32 on the first 512 val sentences, into
# figures/batch/ (about 3 + 15 min on 2 CPU cores; an interrupted run resumes per batch size).
bench-batch: $(STAMP)
	$(BIN)/python -m bildlib.bench.batchbench --check --out figures/batch
	$(BIN)/python -m bildlib.bench.batchbench --out figures/batch

# On a CUDA machine (docs/engines-gpu.md, "On a GPU"): the Triton kernels' tests compiled for the GPU,
# then bildlib.bench.gpu's parts (its --plan lists them: the paper's regime per engine and model,
# lossless BiLD in each dtype and engine, fig4's sweep on the static engine, the probes, the calls),
# into figures/gpu/. Without a GPU it stops at once and says so. It finishes the check after failed
# kernel tests, then fails.
GPU_CHECK_OUT ?= figures/gpu
GPU_CHECK_N ?= 200
# the parts: the 8-minute set by default (bildlib/bench/gpu/check.py, QUICK); "all" adds the kernel
# and LUT benchmarks, HF's forward in bf16 and the paper presets' dry run
GPU_CHECK_PARTS ?=
# Lossless BiLD against vanilla greedy on all of Multi30k val on this machine: both dtypes, today's
# engine and the probed one, then each ISA cap this CPU supports (bildlib.bench.exactness; resumes).
exactness: $(STAMP)
	$(BIN)/python -m bildlib.bench.exactness --sweep

# The engine and row-invariance tests on emulated AVX2 CPUs (no AVX512, no native bf16, as most
# student laptops), from any x86 machine: Debian's qemu-user runs the venv's Python under TCG, where
# torch reports AVX2 and refuses oneDNN's bf16 packing; then lossless BiLD against vanilla on the
# first CPUS_N val sentences in bf16, float32 and int8 (rows in figures/exactness/exactness.csv, ISA "AVX2,
# emulated"). Each CPU model in turn: an AMD EPYC Milan (family 25 model 1: MKL and OpenBLAS pick
# their AMD paths) and an Intel Haswell. It only emulates downward: QEMU 7.2's TCG has no AVX512 or
# AMX. On this project's AMD EPYC (family 25 model 17, 2 CPUs) the tests took 21 min under the Haswell
# model and the two exactness runs about 20 min per model: about 80 min in all, undisturbed (docs/row-invariance.md).
CPUS ?= EPYC-Milan Haswell
CPUS_N ?= 100
CPUS_TESTS ?= tests/test_wholecall.py tests/test_rowinv.py tests/test_kernels_rowinv.py tests/test_engine.py tests/test_cpu_kernels.py tests/test_gemm.py tests/test_gemm8.py tests/test_native_int8.py tests/test_draft.py
test-cpus: $(STAMP)
	@command -v qemu-x86_64 >/dev/null || { echo "make test-cpus needs qemu-x86_64: apt-get install qemu-user"; exit 2; }
	set -eo pipefail; for cpu in $(CPUS); do q="qemu-x86_64 -cpu $$cpu"; echo "== $$q"; export BILD_EMULATED=$$cpu; \
	  $$q $(BIN)/python -c 'import torch; c = torch.backends.cpu.get_cpu_capability(); print("torch sees", c); assert c != "AVX512", c' 2>&1 | grep -v "TCG doesn't support"; \
	  $$q $(BIN)/python -m pytest -q -p no:cacheprovider -o addopts="-ra --durations=10" $(CPUS_TESTS) 2>&1 | grep -v "TCG doesn't support"; \
	  for d in bfloat16 float32 int8; do $$q $(BIN)/python -m bildlib.bench.exactness --strict --dtype $$d --n $(CPUS_N) 2>&1 | grep -v "TCG doesn't support"; done; done

gpu-check: $(STAMP)
	$(BIN)/python -m bildlib.bench.gpu --plan
	@mkdir -p $(GPU_CHECK_OUT)
	set -o pipefail; BILD_KERNEL_TEST_DEVICE=cuda TRITON_INTERPRET=0 $(BIN)/python -m pytest -q -p no:cacheprovider \
	  tests/test_kernels_triton.py tests/test_kernels_rowinv.py 2>&1 | tee $(GPU_CHECK_OUT)/kernel-tests.txt; t=$$?; \
	  $(BIN)/python -m bildlib.bench.gpu --out $(GPU_CHECK_OUT) --n $(GPU_CHECK_N) \
	  $(if $(GPU_CHECK_PARTS),--parts $(GPU_CHECK_PARTS)) && exit $$t

# Rebuilds the committed tokenizer (deterministic: the same bytes each time).
tokenizer: $(STAMP)
	$(BIN)/python -m bildlib.data.tokenizer --out data/checkpoints/multi30k-tokenizer

# Retrains the shipped pair (model cards give the times): large, its greedy outputs on train
# (the calibration set), small, aligned small; then re-measures the cards. Each run resumes
# from its last finished epoch; FRESH=1 discards those states. DEVICE=cuda on a GPU.
TRAIN := $(BIN)/python -m bildlib.train
TRAIN_ARGS = --device $(or $(DEVICE),auto) $(if $(FRESH),--fresh)
models: $(STAMP)
	$(TRAIN) multi30k-large $(TRAIN_ARGS)
	$(TRAIN) calibrate data/checkpoints/multi30k-large --device $(or $(DEVICE),auto)
	$(TRAIN) multi30k-small $(TRAIN_ARGS)
	$(TRAIN) multi30k-small-aligned $(TRAIN_ARGS)
	$(MAKE) cards
	$(MAKE) models-ee

# The early-exit models of fig6 / fig7 (paper 4.4; docs/early-exit.md): the shipped large fine-tuned with two exits
# (multi30k-ee) and with CALM's weighted exits (multi30k-calm). Not committed (the tracked tree
# must stay under 60 MB); each run resumes from its last finished epoch. docs/early-exit.md. Their
# cards go beside them and to build/cards/, compared with the committed ones (bildlib.reports.modelcard).
models-ee: $(STAMP)
	$(TRAIN) multi30k-ee $(TRAIN_ARGS)
	$(TRAIN) multi30k-calm $(TRAIN_ARGS)
	$(BIN)/python -m bildlib.reports.modelcard ee

# The student, the small model made for BiLD (docs/data-and-models.md, Students): the winner of
# notebooks/small_models.ipynb, the small shape distilled from the shipped large's top 32 on its
# greedy outputs (bildlib.train.distill, train.topk; about 25 min on 2 CPU cores), then its card
# (bildlib.reports.modelcard student) beside it and in build/cards/, compared with the committed card
# (data/checkpoints/cards/), which a build leaves as it is (bildlib.reports.modelcard; --publish replaces it).
# Not committed (the tree's 63 MB budget); the run resumes from its last finished epoch.
models-student: $(STAMP)
	$(TRAIN) multi30k-student-top32 $(TRAIN_ARGS)
	$(BIN)/python -m bildlib.reports.modelcard student

# The other candidate students of notebooks/small_models.ipynb (kd: the first student, the teacher
# in the training loop), then PET's ablations (notebooks/pet.ipynb), in train.config.CANDIDATES and
# PET_ABLATIONS: the teacher's top 32 is computed once into build/teacher/, each run resumes from its
# last finished epoch (about 3.5 h in all on 2 CPU cores).
CANDIDATES ?= kd top32 dec2 w256 pet
PET_RUNS ?= none pairs pairs-encqk pairs-decq full full-warmup
models-candidates: $(STAMP)
	@for c in $(CANDIDATES); do $(TRAIN) multi30k-student-$$c $(TRAIN_ARGS) || exit 1; done
	@for c in $(PET_RUNS); do $(TRAIN) multi30k-pet-$$c $(TRAIN_ARGS) || exit 1; done

# Which small model makes BiLD fastest (notebooks/small_models.ipynb): every candidate's cost per
# token, agreement and calibration, and one interleaved sweep of all of them on all of Multi30k val,
# into figures/small_models/ (needs make models-student models-candidates; about 80 min on 2 CPU cores).
small-models: $(STAMP)
	@mkdir -p build/notebooks
	$(PAPERMILL) -p n_examples 1014 -p out_dir figures/small_models \
	  notebooks/small_models.ipynb build/notebooks/small_models.ipynb

# The winner and the two runners-up again under dtype mixed (the small models in float32, the large
# in bf16; models.small_policy), into figures/small_models/mixed/ (about 50 min on 2 CPU cores).
MIXED_CANDIDATES ?= {top32: data/checkpoints/multi30k-student-top32, dec2: data/checkpoints/multi30k-student-dec2, w256: data/checkpoints/multi30k-student-w256}
small-models-mixed: $(STAMP)
	@mkdir -p build/notebooks
	$(PAPERMILL) -p n_examples 1014 -p dtype mixed -p out_dir figures/small_models/mixed \
	  -y '{candidates: $(MIXED_CANDIDATES), max_small_steps: [16]}' \
	  notebooks/small_models.ipynb build/notebooks/small_models-mixed.ipynb

# PET's ablations (notebooks/pet.ipynb) on all of Multi30k val into figures/pet/ (needs make
# models-student models-candidates; a few minutes on 2 CPU cores).
pet: $(STAMP)
	@mkdir -p build/notebooks
	$(PAPERMILL) -p n_examples 1014 -p out_dir figures/pet notebooks/pet.ipynb build/notebooks/pet.ipynb

# The shipped large model quantized every way notebooks/quantized.ipynb compares (bildlib.quant;
# docs/quantization.md): int8, round-to-nearest and SqueezeLLM at 4 and 3 bits, into
# data/checkpoints/quant/ (git-ignored: about 46 MB each; a built label is not built again; a few
# minutes on 2 CPU cores, the Fisher information on 256 calibration pairs first).
quantized: $(STAMP)
	$(BIN)/python -m bildlib.quant.build

# notebooks/quantized.ipynb on all of Multi30k val into figures/quantized/ (needs make quantized),
# then one product of each of the large's matrices, bf16 against int8 (bildlib.bench.int8bench).
quantized-bench: quantized
	@mkdir -p build/notebooks
	$(PAPERMILL) -p n_examples 1014 -p out_dir figures/quantized notebooks/quantized.ipynb \
	  build/notebooks/quantized.ipynb
	$(BIN)/python -m bildlib.bench.int8bench --out figures/quantized

# fig7 then fig6, each in its own interleaved sweep
figures-ee: $(STAMP)
	@mkdir -p build/notebooks
	@for nb in fig7 fig6; do \
	  echo "== $$nb"; \
	  $(PAPERMILL) notebooks/$$nb.ipynb build/notebooks/$$nb.ipynb || exit 1; \
	done

# The decoder-only pair of arXiv v1 Table 2 (docs/language-modelling.md): GPT-2-style small and large trained on
# Multi30k as "de: <German> en: <English>" texts (bildlib.train.causal), then their cards. Not
# committed (the tracked tree must stay under 60 MB); each run resumes from its last finished
# epoch. docs/language-modelling.md.
models-lm: $(STAMP)
	$(TRAIN) multi30k-lm-large $(TRAIN_ARGS)
	$(TRAIN) multi30k-lm-small $(TRAIN_ARGS)
	$(TRAIN) multi30k-lm-student $(TRAIN_ARGS)
	$(BIN)/python -m bildlib.reports.modelcard lm

# Table 2 (perplexity under fallback-only BiLD) and the decoder-only frontier into figures/
# (needs make models-lm; PRESET=wikitext2-gpt2 runs GPT-2 on WikiText-2 from the hub instead)
figures-lm: $(STAMP)
	@mkdir -p build/notebooks
	$(PAPERMILL) notebooks/table2_lm.ipynb build/notebooks/table2_lm.ipynb

# The same with the decoder-only student as the small model, into figures/lm-student/ (needs make models-lm)
figures-lm-student: $(STAMP)
	@mkdir -p build/notebooks
	$(PAPERMILL) -p out_dir figures/lm-student -y '{checkpoints: {small: data/checkpoints/multi30k-lm-student}}' \
	  notebooks/table2_lm.ipynb build/notebooks/table2_lm-student.ipynb

cards: $(STAMP)
	$(BIN)/python -m bildlib.reports.modelcard pair

clean-venv:
	rm -rf $(VENV)

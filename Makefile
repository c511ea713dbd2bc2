# Set-up and entry points. `make benchmark` and `make test` work on a fresh machine (Python 3.10+).
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
CORES ?= all
TORCH ?= torch==2.14.1 torchvision==0.29.1
# The tested versions of every dependency with their sha256 (CPython 3.11 on x86_64 Linux; scripts/lock.py makes it).
# Elsewhere `make install LOCK=` installs pyproject.toml's ranges instead.
LOCK ?= requirements.lock
# pytest-xdist processes of `make test` (each test file runs whole in one of them; 3 on 2 cores keep both busy
# while a whole-pipeline test waits on its snakemake jobs)
TEST_WORKERS ?= 3

.PHONY: install benchmark quick test regression regression-strict regression-seeds reference paper speed networks clean

$(VENV)/.installed: pyproject.toml $(LOCK)
	test -x $(PY) || python3 -m venv $(VENV)
ifneq ($(LOCK),)
	$(BIN)/pip install -q --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e '.[dev]'
	$(BIN)/pip check
else
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[dev]'
endif
	touch $@

install: $(VENV)/.installed

benchmark: install  ## the default synthetic benchmark: every synthetic task, every method
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --cores $(CORES)

quick: install  ## CI-size run of the same DAG
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --cores $(CORES) --configfile config/presets/quick.yaml

test: install  ## the test suite (CPU): TEST_WORKERS pytest-xdist workers, a test file at a time each (README: the time)
	PATH=$(abspath $(BIN)):$$PATH $(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder

regression: install  ## the regression preset (shipped networks, 64 inputs per task) against results/reference/regression
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake regression --cores $(CORES) --forcerun regression \
		--configfile config/presets/regression.yaml \
		|| { cat runs/regression/logs/report/regression.log 2>/dev/null; exit 1; }

regression-strict: regression  ## ... and nothing may move past the measured CPU-kind drift, either way (refactors)
	$(BIN)/vcebench report regression --strict --reference results/reference/regression \
		--results runs/regression/results --out-dir runs/regression/results \
		--out runs/regression/results/regression_strict.md --config config/config.yaml \
		--config config/presets/regression.yaml

regression-seeds: install  ## a change that moves the random draws (docs/ci.md): each cell within its band over the seeds
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake regression --omit-from regression --cores $(CORES) \
		--configfile config/presets/regression.yaml
	$(BIN)/vcebench report regression --mode seeds --reference results/reference/regression \
		--results runs/regression/results --out-dir runs/regression/results \
		--out runs/regression/results/regression_seeds.md --config config/config.yaml \
		--config config/presets/regression.yaml

reference: install  ## the regression preset with seeds 0, 1, 2: accept seed 0's tables, derive per-cell tolerances
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake seeds_reference --cores $(CORES) \
		--configfile config/presets/regression.yaml
	$(BIN)/vcebench report accept --reference $(abspath results/reference/regression) \
		--out-dir runs/regression/results --config config/config.yaml --config config/presets/regression.yaml
	$(BIN)/vcebench report tolerances --reference $(abspath results/reference/regression) \
		--out-dir runs/regression/results --config config/config.yaml --config config/presets/regression.yaml

speed: install  ## after `make benchmark`: FiRe vs MaskDiME / FastDiME at the paper's 60-of-200 DDPM steps, and compaction
	mkdir -p results/speed
	$(BIN)/vcebench profile task --task synthfaces_smile --method fire --method maskdime --method fastdime --n 32 \
		--flop-n 4 --data resources/data/synthfaces --out 'results/speed/synthfaces_smile/{method}.json' \
		--config config/config.yaml --config config/presets/paper_protocol.yaml 2>/dev/null \
		| tee results/speed/synthfaces_smile.md
	$(BIN)/vcebench profile compaction --task synthfaces_age --method fire --n 32 --flop-n 4 \
		--data resources/data/synthfaces --out results/speed/synthfaces_age_compaction.json 2>/dev/null \
		| tee results/speed/synthfaces_age_compaction.txt

networks: install  ## retrain every network from scratch (runs/networks; hours on 2 cores, `device: cuda` for a GPU) and ship it as networks/local
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake networks --cores $(CORES) --config networks=null workdir=runs/networks
	$(BIN)/vcebench models ship --models runs/networks/resources/models --set local --out networks/local \
		--where "$$(hostname), $$(date -u +%F), make networks"

paper: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --cores $(CORES) paper

clean:
	rm -rf results/synth* results/paper resources logs benchmarks .snakemake

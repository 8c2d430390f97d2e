# policyd: `make demo` runs the embedded default; `make test` runs every check from a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# shell: $$assets = the directory of kube-apiserver, etcd and kube-scheduler (built on the first call)
ENVTEST_ASSETS = assets="$$(bash scripts/envtest.sh)" || exit 1; assets="$$(printf '%s\n' "$$assets" | tail -n 1)"

.PHONY: demo test lint unit bench bench-e2e differential venv envtest image clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/policyd simulate --explain

lint: $(STAMP)
	$(VENV)/bin/ruff check policyd tests benchmarks
	$(VENV)/bin/ruff format --check policyd tests benchmarks
	$(VENV)/bin/mypy policyd
	$(VENV)/bin/policyd lint policies/

envtest:
	@bash scripts/envtest.sh >/dev/null

test: $(STAMP) lint
	@# the playground's browser test drives Debian's headless chromium (it fails, never skips, without it)
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver; }
	$(ENVTEST_ASSETS); \
	KUBEBUILDER_ASSETS="$$assets" $(PY) -m pytest -q tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

unit: $(STAMP)
	$(PY) -m pytest -q tests --ignore=tests/integration

bench: $(STAMP)
	$(VENV)/bin/policyd bench

bench-e2e: $(STAMP)
	$(ENVTEST_ASSETS); \
	KUBEBUILDER_ASSETS="$$assets" $(VENV)/bin/policyd bench --mode e2e -w SchedulingBasic/500 --scale 0.2 \
		--qps 1000 --burst 1000 --rounds 3

# policyd against the real kube-scheduler 1.20.2 (tests/differential/README.md); SCENARIOS and SEED override
SCENARIOS ?= 300
SEED ?= 1
differential: $(STAMP)
	$(ENVTEST_ASSETS); \
	KUBEBUILDER_ASSETS="$$assets" $(PY) -m tests.differential --scenarios $(SCENARIOS) --seed $(SEED)

clean:
	rm -rf $(VENV) build dist *.egg-info bench-results

# the OCI image from Debian packages and the checkout's wheel (scripts/image.sh; docs/DEPLOY.md)
image:
	bash scripts/image.sh

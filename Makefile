# Two entry points on a fresh machine: `make demo` (the main job on a bundled example; installs
# only gdb, gcc and the venv) and `make test` (the test suite; installs everything it needs).
.PHONY: setup setup-demo check-packages demo test lint bench fuzz corpus clean
setup:
	@scripts/bootstrap.sh

setup-demo:
	@scripts/bootstrap.sh --demo

# Prove the whole Debian package list installable together (CI runs it on every run).
check-packages:
	@scripts/bootstrap.sh --check-packages

demo: setup-demo
	@scripts/demo.sh

# The suite runs serially by default (70 minutes on a 2-CPU host). `make test TEST_WORKERS=2` runs
# it in parallel (pytest-xdist, a test file per worker: 35 minutes there), but each of the four
# parallel runs so far met one more test that fails only under the other worker's load (three
# fixed, one open: tests/debuggers' lldb breakpoint stepping of four_threads timed out at 120 s),
# so CI stays serial until a parallel run passes whole. The slowest tests are listed at the end.
TEST_WORKERS ?= 0
test: setup lint
	.venv/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

# ruff bans gdb and lldb outside the adapters (pyproject.toml); lint-imports holds the layers of
# docs/ARCHITECTURE.md (tests/unit/test_layers.py also finds any import circle).
lint:
	.venv/bin/ruff check $(wildcard ualdbg gdb lldb tests bench)
	.venv/bin/mypy ualdbg
	.venv/bin/lint-imports --no-cache

# bench/realworld.py fetches Debian's xxHash, LZ4, sqlite3 and CPython sources (pinned by SHA-256)
# into ~/.cache/ualdbg the first time, and builds them there (`--quick` for a shorter run).
bench: setup
	.venv/bin/python bench/run.py; status=$$?; \
	.venv/bin/python bench/patching.py || status=1; \
	.venv/bin/python bench/startup.py || status=1; \
	.venv/bin/python bench/debugger_trace.py || status=1; \
	.venv/bin/python bench/realworld.py || status=1; exit $$status

clean:
	$(MAKE) -C examples clean
	rm -rf .venv .pytest_cache

# The long fuzz run (issues 17, 29): 10,000 mutated inputs per parser, random seeds, each with a
# deadline, and 50 seeded mutations per command; `make test` runs the seed corpus, 150
# derandomized inputs per parser and 8 per command.
fuzz: setup
	UALDBG_FUZZ_EXAMPLES=10000 UALDBG_FUZZ_RANDOM=1 UALDBG_FUZZ_CLI=50 .venv/bin/python -m pytest -q -p no:cacheprovider tests/fuzz

# The resolver against gdb on the whole corpus (issue 18): every memory-access instruction of
# 13 builds of Debian's xxHash, LZ4, fmtlib and MINPACK sources; `make test` checks a sample.
# Then the narrow reads of the data naming and the resolver against the full walks (issue 34).
corpus: setup
	.venv/bin/python tests/symbols/differential.py; status=$$?; .venv/bin/python tests/symbols/datadiff.py --corpus && exit $$status

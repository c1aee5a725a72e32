# Two entry points on a fresh machine: `make demo` (the main job on a bundled example) and
# `make test` (the test suite). Both do all set-up first (scripts/bootstrap.sh).
.PHONY: setup demo test lint bench clean
setup:
	@scripts/bootstrap.sh

demo: setup
	@scripts/demo.sh

test: setup lint
	.venv/bin/python -m pytest -q

lint:
	.venv/bin/ruff check $(wildcard ualdbg gdb lldb tests bench)
	.venv/bin/mypy ualdbg

bench: setup
	.venv/bin/python bench/run.py

clean:
	$(MAKE) -C examples clean
	rm -rf .venv .pytest_cache

# Two entry points on a fresh machine: `make demo` (the main job on a bundled example; installs
# only gdb, gcc and the venv) and `make test` (the test suite; installs everything it needs).
.PHONY: setup setup-demo check-packages demo test lint bench clean
setup:
	@scripts/bootstrap.sh

setup-demo:
	@scripts/bootstrap.sh --demo

# Prove the whole Debian package list installable together (CI runs it on every run).
check-packages:
	@scripts/bootstrap.sh --check-packages

demo: setup-demo
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

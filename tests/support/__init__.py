"""The test suite's one set of helpers (issue 19): where the repository is and what a test may
assume of the machine (`env`), one subprocess runner and its one result type (`run`), one program
builder (`build`), and thin runners over them: the shell command (`cli`), gdb, lldb and
gdb-multiarch against qemu-user (`debuggers`); the report lines they parse (`reports`), the
expected counts of examples/README.md (`expected`), and a program to attach to (`live`).

pytest puts tests/ on sys.path (pyproject.toml: `pythonpath`), so a test imports `support.X`
from any folder."""

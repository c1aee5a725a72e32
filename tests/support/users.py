"""Another local user for tests: nobody (uid 65534) through setpriv, running a world-readable
copy of ualdbg and its packages (the checkout or its venv may be under /root, which nobody cannot
read), in a folder of the test's own that every user can reach."""
from __future__ import annotations

import os
import shutil
import site
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.env import ROOT, require_tool, scrubbed_env

NOBODY = 65534
# A uid that no account has and no test runs as: "another user's" files planted in a place every
# run shares (/dev/shm), which a test's ualdbg running as nobody at the same time (the suite runs
# in parallel) would rightly take for its own.
STRANGER = 54321


def require_root() -> None:
    """Running as another user needs root: skipped locally without it, failed under CI=true (CI
    runs as root, and must never pass by skipping)."""
    if os.geteuid() != 0:
        import pytest

        if os.environ.get("CI") == "true":
            pytest.fail("runs ualdbg as another user: needs root, and CI runs as root")
        pytest.skip("needs root: runs ualdbg as another user")


def as_user(uid: int = NOBODY, gid: int | None = None) -> list[str]:
    """The command prefix that runs what follows as `uid` (no supplementary groups)."""
    return [require_tool("setpriv"), f"--reuid={uid}", f"--regid={uid if gid is None else gid}", "--clear-groups"]


@dataclass(frozen=True)
class Shared:
    """A world-readable folder (mode 0755, root's) with ualdbg and its packages in it."""

    dir: Path
    env: dict[str, str]  # the scrubbed environment with PYTHONPATH at the copy
    python: str  # the interpreter itself (not the venv's link, which nobody may not reach)

    def ualdbg(self, *args: str) -> list[str]:
        return [self.python, "-m", "ualdbg", *args]

    def public(self, path: Path, name: str | None = None) -> Path:
        """A copy of `path` in the folder that every user can read and run."""
        out = self.dir / (name or path.name)
        shutil.copy2(path, out)
        out.chmod(0o755)
        return out


@contextmanager
def shared_install() -> Iterator[Shared]:
    """ualdbg and its packages copied into a new world-readable folder under /tmp, removed after."""
    require_root()
    shared = Path(tempfile.mkdtemp(prefix="ualdbg-users-", dir="/tmp"))
    try:
        shutil.copytree(ROOT / "ualdbg", shared / "code" / "ualdbg", ignore=shutil.ignore_patterns("__pycache__"))
        for packages in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]}:
            if Path(packages).is_dir():
                shutil.copytree(packages, shared / "packages", dirs_exist_ok=True, symlinks=True)
        for path in [shared, *shared.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        env = scrubbed_env()
        env["PYTHONPATH"] = f"{shared / 'code'}:{shared / 'packages'}"
        yield Shared(shared, env, os.path.realpath(sys.executable))
    finally:
        shutil.rmtree(shared, ignore_errors=True)

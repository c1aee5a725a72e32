"""Outputs lose nothing and overwrite nothing (issue 29, items 2 and 9), on real runs: two outputs on
one file, or an output on the program, a file its command line names or the baseline being read,
are refused before the program runs; a full disk (a 64 KiB tmpfs) leaves the previous output whole
and names a fallback; a failed log write keeps the verdict; as root, a symbolic link another user
planted in a sticky directory is never followed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.build import build_source
from support.cli import run_cli
from support.run import Result

PROGRAMS = Path(__file__).resolve().parent / "programs"


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_source(PROGRAMS / "gate.c", tmp_path_factory.mktemp("gate"))


def _need_root(why: str) -> None:
    """Root-only set-ups (a mount, another user): CI runs the tests as root and must not skip."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the tests as root: {why}")
        pytest.skip(f"needs root: {why}")


def _one_line(r: Result, status: int, needle: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == status and len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.explain()


@pytest.mark.parametrize("case", ["json-sarif", "json-log", "sarif-baseline-written", "json-baseline-read",
                                  "json-the-program", "json-via-a-link", "log-a-file-the-program-names"])
def test_two_files_of_a_run_on_one_path_are_refused_before_it_runs(case: str, gate: Path, tmp_path: Path) -> None:
    prog = tmp_path / "prog"
    shutil.copy(gate, prog)
    marker = tmp_path / "ran"
    marker.mkdir()
    out = tmp_path / "out.json"
    out.write_text('{"kept": true}\n')
    (tmp_path / "link.json").symlink_to(out)
    base = tmp_path / "base.json"
    r = run_cli("check", "--update-baseline", "--baseline", str(base), "--", str(prog), "1", "exit:0", timeout=120)
    assert r.returncode == 0, r.explain()
    before = {p: p.read_bytes() for p in (prog, out, base)}
    options, needle = {
        "json-sarif": (["--json", str(out), "--sarif", str(out)], "--json and --sarif name the same file"),
        "json-log": (["--json", str(out), "--log-file", "out.json"], "--json and --log-file name the same file"),
        "sarif-baseline-written": (["--sarif", str(base), "--update-baseline", "--baseline", str(base)],
                                   "--sarif and --baseline name the same file"),
        "json-baseline-read": (["--json", str(base), "--baseline", str(base)], "is the baseline being read"),
        "json-the-program": (["--json", "./prog"], "is the program"),
        "json-via-a-link": (["--json", str(tmp_path / "link.json"), "--sarif", str(out)], "name the same file"),
        "log-a-file-the-program-names": (["--log-file", str(out)], "a file the program's command line names"),
    }[case]
    args = [str(out)] if case == "log-a-file-the-program-names" else []
    r = run_cli("check", *options, "--", "./prog", "1", f"rmdir:{marker}", *args, cwd=tmp_path, timeout=120)
    _one_line(r, 2, needle)
    assert marker.exists(), f"the program ran\n{r.explain()}"
    assert {p: p.read_bytes() for p in before} == before, r.explain()


def test_report_refuses_its_json_and_sarif_on_one_file(gate: Path, tmp_path: Path) -> None:
    doc = tmp_path / "t.json"
    assert run_cli("trace", "--json", str(doc), "--", str(gate), "2", "exit:0", timeout=120).returncode == 0
    _one_line(run_cli("report", str(doc), "--json", str(tmp_path / "x"), "--sarif", str(tmp_path / "x")), 2,
              "--json and --sarif name the same file")


def test_the_log_file_holds_the_whole_report_and_the_verdict(gate: Path, tmp_path: Path) -> None:
    """Before: the verdict reopened the log for writing, and the report before it was lost."""
    log = tmp_path / "log.txt"
    r = run_cli("check", "--log-file", str(log), "--", str(gate), "3", "exit:0", timeout=120)
    assert r.returncode == 1 and r.stderr == "", r.explain()
    text = log.read_text()
    assert "Unaligned accesses in" in text and "ualdbg check: FAIL: 3 unaligned accesses" in text, text


def test_outputs_are_new_files_with_the_umask_and_a_users_own_link_is_followed(gate: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (tmp_path / "t.json").symlink_to("results/t.json")  # the user's own link: followed, kept a link
    r = subprocess.run(["sh", "-c", 'umask 027; exec "$@"', "sh", *_cli(), "trace", "--json", "t.json", "--",
                        str(gate), "2", "exit:0"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "t.json").is_symlink() and json.loads((results / "t.json").read_text())["faults_total"] == 2
    assert (results / "t.json").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in results.iterdir()) == ["t.json"]  # no temporary file left


def _cli() -> list[str]:
    import sys

    return [sys.executable, "-m", "ualdbg"]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, filled but for 4 KiB (unmounted in teardown)."""
    _need_root("a small tmpfs stands for a full disk")
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True, timeout=30)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=30)


def _fill(mnt: Path, leave: int) -> None:
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    (mnt / "filler").write_bytes(b"x" * max(0, free - leave))


def test_a_full_disk_keeps_the_previous_output_whole_and_names_a_fallback(gate: Path, full_disk: Path,
                                                                          tmp_path: Path) -> None:
    out = full_disk / "r.json"
    old = b'{"previous": "run"}\n'
    out.write_bytes(old)
    _fill(full_disk, 4096)
    work = tmp_path / "work"
    work.mkdir()
    r = run_cli("check", "--json", str(out), "--buffer", "1000", "--no-patch", "--", str(gate), "200", "exit:0",
                cwd=work, timeout=120)
    assert r.returncode == 1, r.explain()  # the verdict: 200 unaligned accesses
    assert out.read_bytes() == old, "a truncated document replaced the previous one"
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "r.json"], "a temporary file was left behind"
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("ualdbg: cannot write the JSON output"))
    assert "No space left on device" in line, r.explain()
    fallback = Path(line.rsplit("it is in ", 1)[1])
    assert fallback.parent == work and json.loads(fallback.read_text())["faults_total"] == 200, r.explain()


def test_a_failed_log_write_keeps_the_verdict_and_names_the_report(gate: Path, full_disk: Path, tmp_path: Path) -> None:
    """Before: status 2 and no word of where the report went."""
    _fill(full_disk, 0)
    log = full_disk / "log.txt"
    r = run_cli("check", "--log-file", str(log), "--", str(gate), "3", "exit:0", cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.explain()
    assert not log.exists()
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith(f"ualdbg: cannot write the log file {log} (No space left on device); it is in "), r.explain()
    assert lines[-1] == "ualdbg check: FAIL: 3 unaligned accesses in scope (allowed 0)", r.explain()
    report = Path(lines[0].rsplit("it is in ", 1)[1]).read_text()
    assert "Unaligned accesses in" in report and "ualdbg check: FAIL" in report


def test_root_never_follows_a_link_another_user_planted_in_a_sticky_directory(gate: Path, tmp_path: Path) -> None:
    _need_root("root writing through another user's link is the attack")
    sticky = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    victim_dir = tmp_path / "root-only"
    victim_dir.mkdir(mode=0o700)
    victim = victim_dir / "secret"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    try:
        sticky.chmod(0o1777)
        setpriv = [shutil.which("setpriv") or "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        for name, target in (("x.json", victim), ("new.json", victim_dir / "created")):
            subprocess.run([*setpriv, "ln", "-s", str(target), str(sticky / name)], check=True, timeout=30)
        subprocess.run([*setpriv, "mkdir", str(sticky / "d")], check=True, timeout=30)
        (sticky / "d").rmdir()
        subprocess.run([*setpriv, "ln", "-s", str(victim_dir), str(sticky / "d")], check=True, timeout=30)
        r = run_cli("trace", "--json", str(sticky / "x.json"), "--", str(gate), "2", "exit:0", timeout=120)
        assert r.returncode == 0, r.explain()
        assert victim.read_text() == "secret\n" and victim.stat().st_mode & 0o777 == 0o600
        st = (sticky / "x.json").lstat()
        assert not (sticky / "x.json").is_symlink() and st.st_uid == 0, "the link was followed"
        assert json.loads((sticky / "x.json").read_text())["faults_total"] == 2
        r = run_cli("check", "--sarif", str(sticky / "new.json"), "--log-file", str(sticky / "d" / "log"), "--",
                    str(gate), "2", "exit:0", timeout=120)
        _one_line(r, 2, "is a symbolic link another user owns in a sticky directory")
        assert sorted(p.name for p in victim_dir.iterdir()) == ["secret"], "written through a planted link"
    finally:
        shutil.rmtree(sticky, ignore_errors=True)


def test_devices_are_no_collision(gate: Path, tmp_path: Path) -> None:
    """/dev/null as every output, and as the program's argument: nothing is lost, nothing refused."""
    r = run_cli("check", "--json", "/dev/null", "--sarif", "/dev/null", "--log-file", "/dev/null", "--",
                str(gate), "1", "exit:0", "/dev/null", timeout=120)
    assert r.returncode == 1 and r.stderr == "", r.explain()

"""``tests/sanitize.sh`` without a GPU: a stand-in compute-sanitizer writes the tool's summary line, and
the script's verdict follows the "ERROR SUMMARY" lines and the exit statuses."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "sanitize.sh"
FAKE = r'''#!/usr/bin/env bash
[ "$1" = --version ] && { echo "Compute Sanitizer Version 0.0"; exit 0; }
tool= log=
while [ $# -gt 0 ]; do case "$1" in --tool) tool=$2; shift 2;; --log-file) log=$2; shift 2;; --*) shift 2;; *) break;; esac; done
v="FAKE_${tool^^}"; n=${!v:-0}
# racecheck ends with its own summary line (compute-sanitizer 2025.3), the other tools with ERROR SUMMARY
if [ -z "${FAKE_NO_SUMMARY:-}" ]; then
  if [ "$tool" = racecheck ]; then echo "========= RACECHECK SUMMARY: $n hazards displayed ($n errors, 0 warnings)"
  else echo "========= ERROR SUMMARY: $n errors"; fi > "${log//%p/$$}"
fi
echo "$*" > "$(dirname "$log")/$tool.argv"
echo "===== 3 passed in 0.1s ====="
[ "$n" -eq 0 ] && exit "${FAKE_PYTEST_RC:-0}"
exit 1
'''

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def run(tmp_path: Path, *tools: str, **env: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    environment = {**os.environ, "COMPUTE_SANITIZER": str(fake), "SANITIZE_OUT": str(tmp_path / "logs"), **env}
    return subprocess.run(["bash", str(SCRIPT), *tools], capture_output=True, text=True, env=environment, timeout=120)


def test_all_four_tools_clean(tmp_path) -> None:
    out = run(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        assert f"{tool}: tests/gpu" in out.stdout  # the selection is printed
        line = next(t for t in out.stdout.splitlines() if t.startswith(tool) and "ERROR SUMMARY" in t)
        assert "ERROR SUMMARY: 0 errors" in line and "3 passed" in line and line.endswith("ok")
    argv = (tmp_path / "logs" / "initcheck.argv").read_text()
    assert "--track-unused-memory" not in argv  # a bare switch that would turn tracking on
    assert "-m pytest" in argv and "tests/gpu" in argv
    assert (tmp_path / "logs" / "summary.txt").read_text().count("\n") == 4


@pytest.mark.parametrize("env, reason", [
    ({"FAKE_RACECHECK": "2"}, "FAILED (2 errors"),
    ({"FAKE_NO_SUMMARY": "1"}, "no ERROR SUMMARY"),
    ({"FAKE_PYTEST_RC": "1"}, "FAILED (exit status 1"),
])
def test_any_finding_fails_the_run(tmp_path, env, reason) -> None:
    out = run(tmp_path, "racecheck", "memcheck", **env)
    assert out.returncode == 1 and reason in out.stdout, out.stdout


def test_a_selection_can_be_overridden_and_a_bad_tool_is_a_usage_error(tmp_path) -> None:
    out = run(tmp_path, "synccheck", SANITIZE_SYNCCHECK_TESTS="tests/gpu/test_launch.py")
    assert out.returncode == 0 and "synccheck: tests/gpu/test_launch.py" in out.stdout
    assert run(tmp_path, "leakcheck").returncode == 2

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_python(code: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter of this environment; fail the test with its stderr if it fails."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """The folder holding the real Multi30k files. Absent, the test is skipped with a reason,
    except in CI (CI=true or BILD_REQUIRE_DATA=1), where missing data is a failure."""
    from bildlib.data import multi30k_candidates

    for d in multi30k_candidates():
        if (d / "val.de.gz").is_file():
            return d
    msg = "Multi30k not found: set BILD_DATA_DIR to a folder holding multi30k/ (see README, Data)"
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("BILD_REQUIRE_DATA") == "1":
        pytest.fail(msg)
    pytest.skip(msg)

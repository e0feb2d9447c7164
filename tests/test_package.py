"""The package as a user gets it: the wheel `python -m build` makes, installed in a fresh venv, runs its example."""

from __future__ import annotations

import email
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel once, as a release would (with the dev extra's hatchling: nothing to download)."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (built,) = out.glob("saga_runtime-*.whl")
    return built


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_wheel_holds_py_typed_the_examples_the_license_and_the_metadata(wheel: Path) -> None:
    """The wheel ships py.typed, the examples package, the MIT license, project URLs and classifiers."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(metadata_name))
    assert "saga_runtime/py.typed" in names
    for example in ("__main__", "order", "_trip", "refund_approval"):
        assert f"saga_runtime/examples/{example}.py" in names, example
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "docs/", "benchmarks/")) for n in names)
    assert metadata["License-Expression"] == "MIT"
    assert "Typing :: Typed" in (metadata.get_all("Classifier") or [])
    assert "make demo" in (metadata.get_payload() or "")  # the README is the package index's page


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_wheel_installs_in_a_fresh_venv_and_runs_the_order_example(wheel: Path, tmp_path: Path) -> None:
    """In a fresh venv, the installed wheel lists its examples and runs the order on SQLite."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)]
    subprocess.run(install, check=True, timeout=300, capture_output=True)
    # The dependencies come from this environment (a path entry, so its editable saga_runtime is not seen).
    fresh = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(fresh, "deps_of_the_test.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["SAGA_RUNTIME_DATABASE_URL"] = f"sqlite:///{tmp_path / 'sagas.db'}"

    def run(*args: str) -> str:
        done = subprocess.run(
            [str(python), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    where = run("-c", "import saga_runtime; print(saga_runtime.__file__)")
    assert where.startswith(str(venv)), where
    assert "order" in run("-m", "saga_runtime.examples")
    out = run("-m", "saga_runtime.examples", "order")
    assert ": SUCCESS (3 steps" in out
    assert ": COMPENSATED (3 steps" in out
    assert (tmp_path / "sagas.db").exists()

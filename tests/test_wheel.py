"""The wheel, as a user installs it: `pip wheel` of the project, installed (not editable)
into a fresh venv, runs `dlscale --version`, plans a study and mounts every TUI screen, so
package data (job-script and report templates, the TUI's stylesheet) cannot go missing
from it. The venv reuses this interpreter's installed dependencies (a .pth file) rather
than installing them again (about 15 s: building the wheel)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import HANG_S, REPO

# What the package-data globs in pyproject.toml must carry, found in the checkout itself.
DATA = {
    "dlscale/jobscripts": ("jobscripts", "*.j2"),
    "dlscale/engine/results/report/templates": ("engine/results/report/templates", "*.j2"),
    # the published scaling
    "dlscale/engine/results/projection": ("engine/results/projection", "*.toml"),
    "dlscale/trainers/common/corpus": ("trainers/common/corpus", "*.txt"),  # the GPT's text
    "dlscale/tui": ("tui", "*.tcss"),
}

TUI = textwrap.dedent("""\
    import asyncio, sys
    from pathlib import Path
    import dlscale.tui.app as app_module
    from dlscale.engine.session import Session
    from dlscale.tui.app import DlscaleApp
    from dlscale.tui.dialogs import HelpScreen

    assert Path(app_module.__file__).is_relative_to(sys.prefix), app_module.__file__

    async def main():
        app = DlscaleApp(Session(sys.argv[1], "local"), watch=False)
        async with app.run_test(size=(120, 40)) as pilot:
            for mode in ("build", "queue", "results"):
                app.switch_mode(mode)
                await pilot.pause()
                assert app.current_mode == mode
            await pilot.press("f1")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            print("screens mounted:", len(app.stylesheet.rules), "style rules")

    asyncio.run(main())
    """)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv holding the built wheel, and the wheel's path."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy: setuptools writes build/ and egg-info beside the sources.
    src = tmp / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".dlscale", "build", "*.egg-info", "__pycache__", "tests", "docs"
        ),
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-q", "-w", str(tmp), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp.glob("dlscale-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # Into the empty venv first (nothing there for pip to replace), then the dependencies:
    # this interpreter's site-packages as plain path entries, so no editable finder of the
    # checkout's own install comes with them.
    subprocess.run(
        [*pip, "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=HANG_S,
    )
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    Path(purelib, "zz_dependencies.pth").write_text("\n".join(deps) + "\n")
    return venv, wheel


def run(venv: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env={**env, "DLSCALE_HOME": str(home), "PATH": f"{venv / 'bin'}:{env['PATH']}"},
        cwd=home.parent,
        stdin=subprocess.DEVNULL,
    )


def test_the_wheel_carries_every_template_and_stylesheet(installed):
    _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for prefix, (folder, pattern) in DATA.items():
        files = sorted(p.relative_to(REPO / folder) for p in (REPO / folder).glob(pattern))
        assert files, f"{folder}/{pattern} matches nothing in the checkout"
        missing = [str(f) for f in files if f"{prefix}/{f}" not in names]
        assert not missing, f"not in {wheel.name}: {missing}"


def test_the_installed_wheel_plans_a_study_and_mounts_the_tui(installed, tmp_path):
    venv, _ = installed
    home = tmp_path / "home"
    version = run(venv, str(venv / "bin" / "dlscale"), "--version", home=home)
    assert version.returncode == 0 and "0.1.0" in version.stdout, version
    # a Slurm study plans anywhere (its environments are the profile's); the local
    # quickstart where this Python has torch (the core suite's venvs have none)
    iris = str(REPO / "examples/clusters/ulhpc-iris.toml")
    plans = [["examples/quickstart-slurm.toml", "--profile", iris]]
    if importlib.util.find_spec("torch") is not None:
        plans.append(["examples/quickstart.toml"])
    for spec, *flags in plans:
        plan = run(venv, str(venv / "bin" / "dlscale"), "plan", str(REPO / spec), *flags, home=home)
        assert plan.returncode == 0, plan.stderr
        assert " runs: " in plan.stdout and "Traceback" not in plan.stderr
    tui = run(venv, str(venv / "bin" / "python"), "-c", TUI, str(home), home=home)
    assert tui.returncode == 0, tui.stderr[-3000:]
    assert "screens mounted" in tui.stdout
    assert (venv / "bin" / "dlscale-tui").exists()

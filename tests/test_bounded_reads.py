"""Every file dlscale reads on the user's word (a spec, a profile, a reference) is a
regular file read with a size bound and parsed with a depth bound (issue 22, item 1): a
FIFO, a device, a link to one, a folder or a 5,000-deep TOML is exit 2 naming the file, in
seconds, never a hang, a memory blow-up or an internal error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import HANG_S, dlscale, write_spec
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import SpecError
from tui_text import recorded_study


def _hostile(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / f"bad-{kind}.toml"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev-zero-link":
        p.symlink_to("/dev/zero")
    elif kind == "folder":
        p.mkdir()
    elif kind == "link-loop":
        p.symlink_to(p)
    elif kind == "deep":
        p.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    elif kind == "deep-tables":
        p.write_text("a = " + "{b = " * 100 + "1" + "}" * 100 + "\n")
    elif kind == "huge":
        with open(p, "wb") as fh:
            fh.truncate(64 << 20)  # sparse: 64 MiB of NULs without writing them
    return p


KINDS = ["fifo", "dev-zero-link", "folder", "link-loop", "deep", "deep-tables", "huge"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_spec_that_is_not_a_small_regular_file_is_refused_in_process(tmp_path, kind):
    bad = _hostile(tmp_path, kind)
    with pytest.raises(SpecError) as caught:
        load_spec(bad)
    assert str(bad) in str(caught.value)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "deep"])
def test_every_entry_refuses_a_hostile_file_with_exit_2(tmp_path, home, kind):
    bad = _hostile(tmp_path, kind)
    spec = write_spec(tmp_path / "s.toml")
    name = recorded_study(home)
    for argv in (
        ["plan", str(bad)],
        ["plan", str(spec), "--profile", str(bad)],
        ["report", "-e", name, "--reference", str(bad), "--out", str(tmp_path / "r")],
        ["doctor", "--profile", str(bad)],
    ):
        proc = dlscale(*argv, home=home, timeout=HANG_S)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert str(bad) in proc.stderr and "internal error" not in proc.stderr, proc.stderr

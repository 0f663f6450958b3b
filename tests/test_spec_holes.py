"""Spec and profile values that got through validation and broke later (issue 22, item
10), each refused at its line with what is allowed: nested lists where names belong (and
a form can still be filled from such a spec), a scale written twice ("01x1") or in other
digits ("١x1"), a time limit Slurm would read otherwise ("0", " 30", "30\\n"), more loader
workers than the machine or partition has cores, a warm-up not shorter than the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import HANG_S, REPO, dlscale, write_spec
from dlscale.engine.backends.local.backend import usable_cores
from dlscale.engine.config import specfile
from dlscale.engine.config.profile import load_profile
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import SpecError

PROFILE = REPO / "examples" / "clusters" / "test-cluster.toml"


def _spec(tmp_path: Path, old: str, new: str, **kw) -> Path:
    path = write_spec(tmp_path / "s.toml", **kw)
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(
    "scales, why",
    [
        ('"1x1", "01x1"', "given twice"),
        ('"1x1", "1 x 1"', "given twice"),
        ('"1x1", {nodes = 1, ranks_per_node = 1}', "given twice"),
        ('"1x1", "\u0661x1"', "digits 0-9"),  # Arabic-Indic one
        ('"1x1", "1x\uff12"', "digits 0-9"),  # fullwidth two
    ],
)
def test_a_scale_given_twice_or_in_other_digits_is_refused(tmp_path, scales, why):
    path = write_spec(tmp_path / "s.toml", scales=scales)
    with pytest.raises(SpecError, match=why) as caught:
        load_spec(path)
    assert "experiment.scales" in str(caught.value)


@pytest.mark.parametrize("axis", ["frameworks", "models", "per_device_batch"])
def test_any_axis_value_given_twice_is_refused(tmp_path, axis):
    old = {
        "frameworks": '"pytorch-ddp"]',
        "models": '"resnet20"]',
        "per_device_batch": "[8]",
    }[axis]
    new = {
        "frameworks": '"pytorch-ddp", "pytorch-ddp"]',
        "models": '"resnet20", "resnet20"]',
        "per_device_batch": "[8, 8]",
    }[axis]
    with pytest.raises(SpecError, match=f"experiment.{axis}: .*given twice"):
        load_spec(_spec(tmp_path, old, new))


def test_nested_lists_are_refused_and_still_fill_a_form(tmp_path):
    path = _spec(tmp_path, 'frameworks = ["pytorch-ddp"]', 'frameworks = [["pytorch-ddp"]]')
    with pytest.raises(SpecError, match=r"experiment.frameworks\[0\]"):
        load_spec(path)
    data, problems = specfile.read(path)
    assert any("experiment.frameworks[0]" in p for p in problems)
    for value in data["experiment"].values():  # what a form puts in sets and selections
        for item in value if isinstance(value, list) else [value]:
            hash(item if not isinstance(item, dict) else tuple(item.items()))


@pytest.mark.parametrize(
    "limit", ['"0"', '"00:00:00"', '"0-0"', '" 30"', '"30\\n"', '"\u0663\u0660"']
)
def test_a_time_limit_slurm_would_read_otherwise_is_refused(tmp_path, limit):
    path = tmp_path / "p.toml"
    path.write_text(PROFILE.read_text().replace('time_limit = "00:10:00"', f"time_limit = {limit}"))
    with pytest.raises(SpecError, match="time_limit") as caught:
        load_profile(path)
    assert str(path) in str(caught.value)


def test_a_plain_time_limit_still_loads(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(PROFILE.read_text().replace('time_limit = "00:10:00"', 'time_limit = "30"'))
    assert load_profile(path).profile.time_limit == "30"


def test_warmup_not_shorter_than_the_timed_steps_is_refused(tmp_path):
    path = _spec(tmp_path, "warmup_steps = 1", "warmup_steps = 4")
    with pytest.raises(SpecError, match=r"training\.warmup_steps: the 4 warm-up steps") as err:
        load_spec(path)
    assert "not fewer than the 4 timed steps (steps)" in str(err.value)


def test_more_loader_workers_than_cores_is_refused_locally_and_on_a_partition(tmp_path, home):
    workers = usable_cores() + 1
    path = _spec(tmp_path, "log_every = 2", f"log_every = 2\nloader_workers = {workers}")
    local = dlscale("plan", str(path), home=home, timeout=HANG_S)
    assert local.returncode == 2 and "loader_workers" in local.stderr, local.stderr
    slurm = dlscale("plan", str(path), "--profile", str(PROFILE), home=home, timeout=HANG_S)
    assert slurm.returncode == 2 and "loader worker(s)" in slurm.stderr, slurm.stderr

"""`dlscale check`: its rule on points made by hand, and its three exit codes with the
JUnit file on real runs (a 1-device study, 3 repetitions of 8 steps, 10 to 20 s a run on
2 busy cores; the module costs about 2.5 minutes): the baseline exported as a bundle, the
same study run again passing, and run with the trainer's test-only slowdown
(DLSCALE_TEST_SLOWDOWN) failing."""

import xml.etree.ElementTree as ET

import pytest
from test_store import make_run

from conftest import dlscale, write_spec
from dlscale.engine.results.check import (
    PASSED,
    REGRESSED,
    SKIPPED,
    Baseline,
    check,
    judge,
    repetitions_needed,
)
from dlscale.engine.results.points import POINT_FIELDS, Point, spread


def _point(values, states=None, **kw) -> Point:
    run = make_run(**{"per_device_batch": 16, **kw})
    p = Point(**{k: getattr(run, k) for k in POINT_FIELDS}, device="cpu", lr_schedule="constant")
    p.throughputs = list(values)
    p.states = states or ["COMPLETED"] * len(values)
    p.run_ids = [f"{i:012x}" for i in range(len(p.states))]
    p.throughput = spread(p.throughputs)
    return p


BASE = _point([100.0, 100.5, 99.5])


@pytest.mark.parametrize(
    "values,outcome,says",
    [
        ([99.0, 100.0, 101.0], PASSED, "against the baseline's 100.0"),
        ([90.0, 90.5, 89.5], REGRESSED, "10.0% slower"),
        ([96.0, 96.2, 95.8], PASSED, ""),  # slower, but not beyond the tolerance
        ([94.0, 94.1, 93.9], REGRESSED, ""),  # its whole interval is below 95
        ([100.0], SKIPPED, "it needs about"),  # no interval: how many, from the baseline
        ([80.0, 100.0, 120.0], SKIPPED, "too noisy"),
        ([96.0, 100.0, 104.0], SKIPPED, "too wide to tell a 10% slowdown"),
    ],
)
def test_the_rule(values, outcome, says):
    v = judge(_point(values), BASE, 0.05, 0.05)
    assert v.outcome == outcome, v.why
    assert says in v.why


def test_failed_runs_are_a_regression_and_unmatched_points_are_listed():
    current = [
        _point([], states=["FAILED", "FAILED"]),
        _point([100.0, 101.0], nodes=2),
    ]
    base = Baseline("b", "test", [BASE, _point([50.0, 50.0], per_device_batch=32)])
    verdicts = {(v.name, v.outcome): v.why for v in check(current, base, 0.05)}
    outcomes = sorted(o for _, o in verdicts)
    assert outcomes == sorted([REGRESSED, SKIPPED, SKIPPED])
    assert any("no repetition completed (FAILED)" in why for why in verdicts.values())
    assert any("no such point in the baseline" in why for why in verdicts.values())
    assert any("not measured in this study" in why for why in verdicts.values())


def test_repetitions_needed_shrink_the_interval_to_the_margin():
    n = repetitions_needed(0.02, 0.01)
    from scipy.special import stdtrit

    assert (
        stdtrit(n - 1, 0.975) * 0.02 / n**0.5
        <= 0.01
        < stdtrit(n - 2, 0.975) * 0.02 / (n - 1) ** 0.5
    )
    assert repetitions_needed(10.0, 0.001) is None


# --- real runs ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("check")
    spec = write_spec(
        tmp / "study.toml",
        name="checked",
        scales='"1x1"',
        steps=8,
        experiment="repetitions = 3",
    )
    spec.write_text(
        spec.read_text()
        .replace("repetitions = 1\n", "")
        .replace("per_device_batch = [8]", "per_device_batch = [16]")
    )
    home = tmp / "baseline-home"
    dlscale("run", str(spec), "--wait", home=home, check=0)
    bundle = tmp / "baseline.tar.gz"
    dlscale("export", "bundle", "--out", str(bundle), "--site", "before", home=home, check=0)
    return spec, bundle


def _junit(path):
    suite = ET.parse(path).getroot().find("testsuite")
    return {c.get("name"): c for c in suite.findall("testcase")}, suite


@pytest.mark.slow
def test_check_passes_an_unchanged_study_and_fails_a_slowed_one(baseline, tmp_path, monkeypatch):
    spec, bundle = baseline
    # Wide margins: five agents share this machine's 2 cores, and one run's throughput
    # swings up to 2x with their load (measured). The rule itself is test_the_rule's.
    args = ["check", str(spec), "--baseline", str(bundle), "--max-cv", "90%", "--run"]
    proc = dlscale(
        *args, "--tolerance", "60%", "--junit", str(tmp_path / "same.xml"), home=tmp_path / "same"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases, suite = _junit(tmp_path / "same.xml")
    (case,) = cases.values()
    assert suite.get("failures") == "0" and case.find("failure") is None
    assert "checked against checked@before" in suite.get("name")
    assert "1 points:" in proc.stdout and "0 regressed" in proc.stdout

    monkeypatch.setenv("DLSCALE_TEST_SLOWDOWN", "0.8")  # a fifth of the throughput
    proc = dlscale(
        *args, "--tolerance", "30%", "--junit", str(tmp_path / "slow.xml"), home=tmp_path / "slow"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSED" in proc.stdout and "1 regressed" in proc.stdout
    metrics = next((tmp_path / "slow" / "runs").glob("*/metrics.jsonl"))
    assert '"test_slowdown": 0.8' in metrics.read_text()
    cases, suite = _junit(tmp_path / "slow.xml")
    (case,) = cases.values()
    assert suite.get("failures") == "1"
    failure = case.find("failure")
    assert failure is not None and "slower" in failure.get("message")
    assert case.get("name") == "pytorch-ddp resnet20 synthetic-cifar 1x1 b16 fp32 native"


@pytest.mark.slow  # its baseline is 3 real runs
def test_bad_input_exits_2_and_runs_nothing(baseline, tmp_path):
    spec, bundle = baseline
    home = tmp_path / "h"
    cases = [
        (["--baseline", "no-such"], "neither an experiment in the store"),
        (["--baseline", str(bundle), "--tolerance", "5 percent"], "--tolerance"),
        (["--baseline", str(bundle), "--max-cv", "-1"], "--max-cv"),
        (["--baseline", str(spec)], "bundle refused"),  # a file, but not a bundle
        (["--baseline", str(bundle)], "no completed run"),  # not run yet, and no --run
    ]
    for extra, says in cases:
        proc = dlscale("check", str(spec), *extra, "--junit", str(tmp_path / "j.xml"), home=home)
        assert proc.returncode == 2, (extra, proc.stdout, proc.stderr)
        assert says in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "j.xml").exists()
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_the_slowdown_knob_takes_only_a_fraction(monkeypatch):
    from dlscale.trainers.common.entry import TrainerError
    from dlscale.trainers.common.loop import injected_slowdown

    for text, value in (("", 0.0), ("0.10", 0.10), (" 0 ", 0.0)):
        monkeypatch.setenv("DLSCALE_TEST_SLOWDOWN", text)
        assert injected_slowdown() == value
    for bad in ("abc", "-0.1", "0.95", "nan", "inf"):
        monkeypatch.setenv("DLSCALE_TEST_SLOWDOWN", bad)
        with pytest.raises(TrainerError, match="DLSCALE_TEST_SLOWDOWN"):
            injected_slowdown()

"""The history of `dlscale check` (engine/results/history.py) and the change points over a
point's series (engine/results/changepoints.py): whole lines appended, bad lines refused
naming the file and the line, the window per site and point, and change points found
where a synthetic series shifts (and not where it only wanders). Pure: about 2 s."""

import json
import random

import pytest

from dlscale.engine.errors import UserError
from dlscale.engine.results.regression import changepoints, history
from dlscale.engine.results.regression.changepoints import change_points


def _entry(value, site="s", point="p", label="c", statistic="median step", **kw):
    return history.Entry(
        statistic=statistic,
        date="2026-11-26T00:00:00Z",
        label=label,
        site=site,
        experiment="e",
        point=point,
        values=[value],
        value=value,
        outcome="passed",
        **kw,
    )


def test_entries_append_as_whole_lines_and_read_back_as_series(tmp_path):
    path = tmp_path / "h.jsonl"
    assert history.read(path).entries == []  # not there yet: an empty history
    history.append(path, [_entry(100.0, label="a"), _entry(50.0, site="t")])
    history.append(path, [_entry(101.0, label="b"), _entry(7.0, point="q")])
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line) for line in lines)
    h = history.read(path)
    assert [e.label for e in h.series("s", "p", None, "median step")] == ["a", "b"]
    assert [e.value for e in h.series("t", "p", None, "median step")] == [50.0]  # each site's
    # each measure its own series (check --measure): a CPU-time value is not a throughput's
    history.append(path, [_entry(9.0, statistic="cpu")])
    assert [e.value for e in history.read(path).series("s", "p", None, "cpu")] == [9.0]
    assert 9.0 not in [e.value for e in history.read(path).series("s", "p", None, "median step")]


@pytest.mark.parametrize(
    "line,says",
    [
        ("{not json", ":2: not a JSON line"),
        ('{"date": "x"}', ":2: label: Field required"),
        (json.dumps({**_entry(1.0).model_dump(), "values": [-1.0]}), ":2: values.0:"),
        (json.dumps({**_entry(1.0).model_dump(), "value": float("nan")}), ":2: value:"),
    ],
)
def test_a_bad_line_is_bad_input_naming_file_and_line(tmp_path, line, says):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(_entry(1.0).model_dump()) + "\n" + line + "\n")
    with pytest.raises(UserError, match=says) as got:
        history.read(path)
    assert str(path) in str(got.value)


def test_a_history_that_is_not_a_file_is_refused(tmp_path):
    with pytest.raises(UserError, match="cannot be read"):
        history.read(tmp_path)


def _series(rng, shift_at, n, noise=0.05, shift=-0.10):
    return [
        100 * (1 + (shift if i >= shift_at else 0)) * (1 + rng.gauss(0, noise)) for i in range(n)
    ]


def test_change_points_find_a_shift_and_say_how_large():
    rng = random.Random(11)
    found = 0
    for _ in range(100):
        cps = change_points(_series(rng, 20, 40), 0.05)
        found += any(abs(c.index - 20) <= 2 and -0.15 < c.change < -0.05 for c in cps)
    assert found >= 85  # measured: 91 of 100 (noise 5%, a 10% step in the middle)


def test_change_points_stay_quiet_on_a_steady_series_and_below_the_smallest_change():
    rng = random.Random(12)
    false = sum(bool(change_points(_series(rng, 99, 40), 0.05)) for _ in range(100))
    assert false <= 5  # measured: 2 of 100
    small = _series(random.Random(13), 20, 40, noise=0.005, shift=-0.02)
    assert change_points(small, 0.05) == []  # significant, but under the change that counts
    assert [c.index for c in change_points(small, 0.01)] == [20]
    assert change_points([100.0, 90.0, 80.0], 0.05) == []  # too short to split


def test_without_ruptures_change_points_say_which_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ruptures", None)
    with pytest.raises(changepoints.NoChangePointLibrary, match=r"dlscale\[history\]"):
        change_points([100.0] * 10 + [80.0] * 10, 0.05)

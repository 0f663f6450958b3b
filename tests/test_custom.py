"""Declared frameworks (engine/config/custom.py): bad declarations refused with the field,
placeholders filled per argv element, the declaration in the run's identity, log patterns
read from recorded output (Horovod's synthetic benchmark, torchrun's)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO, dlscale
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import SpecError
from dlscale.engine.launching import custom_launch, jobscript
from dlscale.engine.launching.plan import plan
from dlscale.engine.tracking.log_patterns import Patterns

GPT = REPO / "examples" / "custom" / "gpt.py"
FIXTURES = REPO / "tests" / "fixtures" / "custom"


def spec_text(
    command: str = '["{python}", "{script}", "--seq-len", "{seq_len}"]',
    extra: str = "",
    log: str = "throughput = 'throughput ([0-9.]+) tokens/s$'",
    frameworks: str = '["gpt"]',
    script: str = str(GPT),
    length: str = "steps = 3",
) -> str:
    return f"""\
[experiment]
name = "c"
frameworks = {frameworks}
models = ["gpt2-tiny"]
datasets = ["synthetic-tokens"]
scales = ["1x1", "1x2"]
per_device_batch = [4]
precisions = ["fp32"]
repetitions = 1

[experiment.axes]
seq_len = [16, 32]

[training]
{length}
warmup_steps = 1

[frameworks.gpt]
script = "{script}"
command = {command}
{extra}

[frameworks.gpt.log]
{log}
"""


BAD = {
    "unknown placeholder": (
        {"command": '["{python}", "{script}", "--len", "{seqlen}"]'},
        r":\d+: frameworks\.gpt\.command\[3\]: unknown placeholder \{seqlen\}",
    ),
    "attribute of a placeholder": (
        {"command": '["{python}", "{nodes.real}"]'},
        r"frameworks\.gpt\.command\[1\]: unknown placeholder \{nodes\.real\}",
    ),
    "lone brace": (
        {"command": '["{python}", "{"]'},
        r"frameworks\.gpt\.command\[1\]: .*literal brace",
    ),
    "unknown launcher": (
        {"extra": 'launcher = "pdsh"'},
        r":\d+: frameworks\.gpt\.launcher: Input should be 'srun', 'torchrun' or 'mpirun'",
    ),
    "missing script": (
        {"script": "no-such-script.py"},
        r":\d+: frameworks\.gpt\.script: no such file: 'no-such-script.py'",
    ),
    "bad unit": (
        {"extra": 'unit = "frames"'},
        r":\d+: frameworks\.gpt\.unit: Input should be 'images', 'samples' or 'tokens'",
    ),
    "bad pattern regex": (
        {"log": "throughput = '(unclosed ([0-9.]+)'"},
        r":\d+: frameworks\.gpt\.log\.throughput: .* is not a regular expression",
    ),
    "pattern that captures nothing": (
        {"log": "throughput = 'tokens/s'"},
        r"frameworks\.gpt\.log\.throughput: .* captures nothing",
    ),
    "neither throughput nor step time": (
        {"log": "loss = 'loss ([0-9.]+)'"},
        r"frameworks\.gpt\.log: .*exactly one of throughput",
    ),
    "declared and built-in together": (
        {"frameworks": '["gpt", "pytorch-ddp"]'},
        r":\d+: experiment\.frameworks: declared frameworks \(gpt\) and built-in ones",
    ),
    "steps placeholder where the spec gives epochs": (
        {"command": '["{python}", "{script}", "{steps}"]', "length": "epochs = 2"},
        r"\(file\): frameworks\.gpt\.command uses \{steps\}, and training gives epochs",
    ),
    "comm benchmark under mpirun": (
        {"extra": 'launcher = "mpirun"\ncomm = { parameters = 1000 }'},
        r":\d+: frameworks\.gpt\.comm: .*torchrun or srun sets up",
    ),
    "comm benchmark of no parameters": (
        {"extra": "comm = { parameters = 0 }"},
        r":\d+: frameworks\.gpt\.comm\.parameters: Input should be greater than or equal to 1",
    ),
    "comm benchmark with a misspelt field": (
        {"extra": "comm = { parameter = 10 }"},
        r":\d+: frameworks\.gpt\.comm\.parameter: unknown key; allowed keys here: parameters",
    ),
    "unknown framework": (
        {"frameworks": '["gtp"]'},
        r"experiment\.frameworks: unknown framework 'gtp'; allowed: .*pytorch-ddp.*, gpt",
    ),
    "a pattern shown as written, backslashes single": (
        {"log": "throughput = '(\\d+ ([0-9.]+)'"},
        r"frameworks\.gpt\.log\.throughput: '\(\\d\+ \(\[0-9\.\]\+\)' is not a regular",
    ),
    "warm-up not fewer than steps where the command gets both": (
        {"command": '["{python}", "{script}", "{steps}", "{warmup_steps}"]', "length": "steps = 1"},
        r":\d+: training\.warmup_steps: the 1 warm-up steps .* the command gets both",
    ),
    "steps placeholder where the spec gives no length": (
        {"command": '["{python}", "{script}", "{steps}"]', "length": ""},
        r"frameworks\.gpt\.command uses \{steps\}, and \[training\] gives no steps: add steps",
    ),
    "steps and epochs both": (
        {"length": "steps = 2\nepochs = 1"},
        r":\d+: training: give at most one of steps or epochs",
    ),
    "a records completion with log patterns": (
        {"extra": 'complete_when = "records"'},
        r":\d+: frameworks\.gpt\.complete_when: with a \[log\] table .*log\.complete_when",
    ),
    "an unknown completion": (
        {"extra": 'complete_when = "summary"'},
        r":\d+: frameworks\.gpt\.complete_when: Input should be 'exit' or 'records'",
    ),
    "a final line that is no pattern": (
        {"log": "throughput = 'throughput ([0-9.]+)'\ncomplete_when = '(done'"},
        r":\d+: frameworks\.gpt\.log\.complete_when: '\(done' is not a regular expression",
    ),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_declaration_is_exit_2_naming_the_field(case, tmp_path, home):
    changes, expected = BAD[case]
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text(**changes))
    out = dlscale("plan", str(spec), check=2)
    assert re.search(re.escape(str(spec)) + ".*" + expected, out.stderr), out.stderr
    assert "Traceback" not in out.stderr


def test_a_script_needs_of_training_only_what_its_command_uses(tmp_path):
    """Issue 37, item 4: no [training] at all where the command names none of it, and a
    warm-up the command never gets is no reason to refuse its steps."""
    spec = tmp_path / "s.toml"
    no_training = spec_text(command='["{python}", "{script}", "--seq-len", "{seq_len}"]')
    spec.write_text(no_training.replace("[training]\nsteps = 3\nwarmup_steps = 1\n", ""))
    assert "[training]" not in spec.read_text()
    assert len(plan(load_spec(spec)).runs) == 4
    spec.write_text(spec_text(command='["{python}", "{script}", "{steps}"]', length="steps = 1"))
    assert len(plan(load_spec(spec)).runs) == 4  # warmup_steps 1, which it never gets
    # A declaration without complete_when plans the runs it always did (it is no part of
    # their identity at its default, "exit").
    runs = [r.run_id for r in plan(_loaded(tmp_path)).runs]
    explicit = plan(_loaded(tmp_path, extra='complete_when = "exit"')).runs
    assert [r.run_id for r in explicit] == runs


@pytest.mark.parametrize("table", ["experiment", "training"])
def test_a_missing_table_is_named_with_its_file_and_line(tmp_path, table):
    """A built-in framework's spec still needs [training]: the error says where to add it
    (the file's end), and a key missing from a table names that table's line."""
    spec = tmp_path / "s.toml"
    text = (REPO / "examples" / "quickstart.toml").read_text()
    start = text.index(f"[{table}]")
    end = text.find("\n[", start + 1)
    spec.write_text(text[:start] + (text[end + 1 :] if end > 0 else ""))
    last = len(spec.read_text().splitlines())
    with pytest.raises(SpecError) as refused:
        load_spec(spec)
    missing = f"{spec}:{last}: {table}: required, but missing: add a [{table}] table"
    assert missing in refused.value.problems, refused.value.problems
    spec.write_text(text.replace('models = ["resnet20"]\n', ""))
    line = text.splitlines().index("[experiment]") + 1
    with pytest.raises(SpecError) as refused:
        load_spec(spec)
    assert f"{spec}:{line}: experiment.models: required, but missing" in str(refused.value)


def test_axes_need_a_declared_framework(tmp_path, home):
    spec = tmp_path / "s.toml"
    text = (REPO / "examples" / "quickstart.toml").read_text()
    spec.write_text(text.replace("[training]", "[experiment.axes]\nseq_len = [1]\n\n[training]"))
    out = dlscale("plan", str(spec), check=2)
    assert "experiment: axes are for declared frameworks" in out.stderr


def _loaded(tmp_path: Path, **kw):
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text(**kw))
    return load_spec(spec)


def test_axes_expand_and_the_command_is_part_of_the_identity(tmp_path):
    runs = plan(_loaded(tmp_path)).runs
    assert sorted((r.scale, r.training["axes"]["seq_len"]) for r in runs) == [
        ("1x1", 16),
        ("1x1", 32),
        ("1x2", 16),
        ("1x2", 32),
    ]
    assert len({r.point_id for r in runs}) == 4
    edited = plan(_loaded(tmp_path, command='["{python}", "{script}", "--len", "{seq_len}"]'))
    assert not {r.run_id for r in runs} & {r.run_id for r in edited.runs}
    again = plan(_loaded(tmp_path))
    assert [r.run_id for r in again.runs] == [r.run_id for r in runs]


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=0, max_size=30))
def test_a_value_is_one_argv_element_never_expanded_again(tmp_path_factory, text):
    """Whatever an axis value holds (spaces, quotes, braces, $(...)), it is one element,
    exactly as written: format_map fills once and never reads a value as a template."""
    folder = tmp_path_factory.mktemp("p")
    spec = folder / "s.toml"
    body = spec_text(command='["{python}", "--name={seq_len}", "{seq_len}"]')
    value = text.replace("\\", "\\\\").replace('"', '\\"')
    value = "".join(c if c.isprintable() else "" for c in value)
    body = body.replace("seq_len = [16, 32]", f'seq_len = ["{value}"]')
    spec.write_text(body)
    loaded = load_spec(spec)
    want = loaded.spec.experiment.axes["seq_len"][0]
    run = plan(loaded).runs[0]
    argv = custom_launch.rank_command(run, Path("/r"), "cpu", "/py", str(folder))
    assert argv == ["/py", f"--name={want}", want]


def test_job_scripts_quote_every_element(tmp_path):
    from dlscale.engine.config.profile import load_profile

    for launcher in ("srun", "torchrun", "mpirun"):
        loaded = _loaded(tmp_path, extra=f'launcher = "{launcher}"')
        run = next(r for r in plan(loaded).runs if r.scale == "1x2")
        profile = load_profile(REPO / "examples" / "clusters" / "test-cluster.toml")
        text = jobscript.render(run, profile, tmp_path / "run", loaded.path)
        assert f"{GPT} --seq-len {run.training['axes']['seq_len']}" in text
        assert "export DLSCALE_RUN=" in text and "export DLSCALE_METRICS=" in text
        if launcher == "torchrun":
            assert "--no-python" in text and "--ntasks-per-node=1" in text
        if launcher == "mpirun":
            assert "mpirun -np 2" in text


# --- log patterns, on recorded output ------------------------------------------------


def _read(fixture: str, log: dict, units_per_step: float = 1, devices: int = 2):
    p = Patterns(log, units_per_step, devices)
    m = p.read((FIXTURES / fixture).read_text().splitlines())
    return p, m


def test_horovod_synthetic_benchmark_per_device_rates():
    # Lines as Horovod's pytorch_synthetic_benchmark.py prints them (its log() calls; the
    # numbers are made up): each "Iter" line is one iteration of 10 batches, in images a
    # second per GPU; the closing mean lines must not count, nor anything before
    # "Running benchmark".
    p, m = _read(
        "horovod_synthetic.log",
        {
            "throughput": r"^Iter #\d+: ([0-9.]+) img/sec per GPU",
            "throughput_per": "device",
            "warmup_until": "^Running benchmark",
        },
        units_per_step=32 * 10 * 2,
    )
    rates = [98.2, 99.0, 97.6, 98.8, 99.4]
    assert [r for r, _, _ in m.rates] == [2 * r for r in rates]
    throughput, elapsed = p.summarize(m)
    assert throughput == pytest.approx(2 * len(rates) / sum(1 / r for r in rates))
    assert elapsed == pytest.approx(5 * 640 / throughput)


def test_torchrun_tee_step_times_of_rank_0_after_warmup():
    # Recorded: torchrun --tee 3 of examples/custom/gpt.py on 2 ranks (each line prefixed
    # [default0]:). The step time in ms, converted with the batch; warm-up by a count.
    log = {
        "step_time": r"^\[default0\]:step \d+ .*time ([0-9.]+) ms",
        "step_time_unit": "ms",
        "loss": r"^\[default0\]:step \d+ loss ([0-9.]+)",
        "warmup_lines": 1,
    }
    p, m = _read("torchrun_tee.log", log, units_per_step=16 * 64)
    assert m.step_times == pytest.approx([0.08655, 0.04423, 0.07043, 0.05431])
    assert [loss for _, loss, _ in m.rates] == [6.2527, 6.2385, 6.2593, 6.2545]
    assert [loss for _, loss, _ in m.warmup] == [6.2471]
    throughput, elapsed = p.summarize(m)
    assert elapsed == pytest.approx(sum(m.step_times))
    assert throughput == pytest.approx(4 * 1024 / elapsed)


def test_a_warmup_pattern_that_never_matches_leaves_nothing():
    p, m = _read("torchrun_tee.log", {"throughput": r"([0-9.]+) tokens/s", "warmup_until": "x{9}"})
    assert p.summarize(m) is None


def test_a_log_without_matches_measures_nothing():
    p, m = _read("torchrun_tee.log", {"throughput": r"img/sec ([0-9.]+)"})
    assert p.summarize(m) is None


def test_the_build_screen_lists_and_checks_the_declared_frameworks(home):
    """What the TUI's Build screen asks of the engine: the declared framework among the
    choices (after the built-in ones), its own models and datasets, a form check that finds
    its script from the spec's folder, and a preview that plans its runs."""
    from dlscale.engine.config import specfile
    from dlscale.engine.session import Session

    path = REPO / "examples" / "custom" / "gpt-log.toml"
    data, problems = specfile.read(path)
    assert problems == []
    choices = specfile.choices(data)
    assert choices["frameworks"][-1] == "gpt" and "pytorch-ddp" in choices["frameworks"]
    assert "gpt2-tiny" in choices["models"] and "synthetic-tokens" in choices["datasets"]
    assert specfile.choices({}) is specfile.CHOICES
    loaded, problems = specfile.check(data, str(path))
    assert problems == [] and loaded is not None
    session = Session(home, "local")
    named = [c for c in session.framework_choices(data) if c.name == "gpt"]
    assert [(c.usable, c.why) for c in named] == [(True, "")]
    assert "gpt" not in [c.name for c in session.framework_choices()]
    preview = session.preview(data, str(path))
    assert preview.problems == () and preview.runs == 4


def test_a_rerun_writes_its_records_in_its_own_folder(tmp_path):
    """A rerun of a declared framework's run on the local backend: the variables that name
    the records' file and the run follow it to the new folder, as its argv does."""
    from dlscale.engine.backends.local.backend import LocalBackend
    from dlscale.engine.tracking.store import Store

    store = Store(tmp_path / "home")
    run = plan(_loaded(tmp_path)).runs[0]
    old_dir, new_dir = tmp_path / "runs" / run.run_id, tmp_path / "runs" / "newrun000000"
    argv, env = custom_launch.local_command(run, old_dir, str(tmp_path), "cpu", "/pp")
    old = {"run_id": run.run_id, "run_dir": str(old_dir), "nodes": 1, "ranks_per_node": 1}
    new = {**old, "run_id": "newrun000000", "run_dir": str(new_dir)}
    new["training"] = '{"threads_per_rank": 1}'

    def moved(text: str) -> str:
        return text.replace(str(old_dir), str(new_dir)).replace(run.run_id, "newrun000000")

    request = LocalBackend(store, start_worker=False).repeat(
        old, new, {"argv": argv, "env": env}, moved
    )
    assert request.env["DLSCALE_METRICS"] == str(new_dir / "metrics.jsonl")
    assert '"run_id": "newrun000000"' in request.env["DLSCALE_RUN"]


def test_each_axis_value_is_a_line_of_its_own_in_charts():
    from dlscale.engine.results.charts import series

    rows = [
        {"framework": "gpt", "model": "m", "ranks": n, "axes": {"seq_len": s}, "unit": "tokens"}
        for s in (1024, 2048)
        for n in (1, 2)
    ]
    assert sorted(series(rows)) == ["gpt seq_len=1024", "gpt seq_len=2048"]
    assert [r["ranks"] for r in series(rows)["gpt seq_len=2048"]] == [1, 2]
    assert list(series(rows[:2])) == ["gpt"]  # one value: nothing to tell apart


def test_speedup_is_against_the_single_device_point_of_the_same_axis_value(tmp_path):
    """Through the real store: seq_len 64's 2-rank point is measured against seq_len 64's
    single-device point, not the faster seq_len 16's."""
    from test_store import line

    from dlscale.engine.results.analysis import results
    from dlscale.engine.tracking.store import Store

    store = Store(tmp_path / "home")
    runs = plan(_loaded(tmp_path, frameworks='["gpt"]')).runs
    speed = {("1x1", 16): 400.0, ("1x2", 16): 700.0, ("1x1", 32): 100.0, ("1x2", 32): 190.0}
    store.add_runs(runs)
    for run in runs:
        path = tmp_path / f"{run.run_id}.jsonl"
        value = speed[(run.scale, run.training["axes"]["seq_len"])]
        fields = {"timed_steps": 10, "warmup_steps": 1, "elapsed_s": 1.0}
        path.write_text(line("summary", status="completed", throughput=value, **fields))
        store.records.ingest(run.run_id, path)
        store.update_run(run.run_id, state="COMPLETED")
    rows = {(r["ranks"], r["axes"]["seq_len"]): r for r in results(store)}
    assert rows[(2, 32)]["speedup"] == pytest.approx(1.9)
    assert rows[(2, 16)]["speedup"] == pytest.approx(1.75)
    assert rows[(2, 32)]["baseline"] == "gpt 1x1 seq_len=32"
    assert {r["unit"] for r in rows.values()} == {"samples"}  # the declaration's default


def test_what_this_machine_cannot_start_is_refused_before_anything_is_submitted(tmp_path, home):
    spec = tmp_path / "s.toml"
    extra = '[frameworks.gpt.software]\nmodules = ["PyTorch/2.3"]'
    spec.write_text(spec_text(extra=extra))
    out = dlscale("run", str(spec), home=home, check=2)
    assert re.search(
        re.escape(str(spec)) + r":\d+: frameworks\.gpt\.software\.modules: modules are "
        "loaded in Slurm jobs only",
        out.stderr,
    ), out.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.floats(min_value=0.01, max_value=5000, allow_nan=False), min_size=1, max_size=40),
    st.integers(min_value=0, max_value=5),
    st.lists(st.text(max_size=40), max_size=5),
)
def test_step_times_give_units_over_time_whatever_lines_come_between(times, warm, noise):
    """Any step times in ms, any warm-up count, any other output between them: the
    throughput is the measured steps' units over their time, warm-up left out."""
    lines = []
    for i, t in enumerate(times):
        lines += [f"step {i} took {t!r} ms", *(n.replace("took", "") for n in noise)]
    p = Patterns(
        {
            "step_time": r"^step \d+ took ([0-9.e+-]+) ms$",
            "step_time_unit": "ms",
            "warmup_lines": warm,
        },
        units_per_step=96,
        devices=2,
    )
    m = p.read(lines)
    measured = [t / 1000 for t in times[warm:]]
    if not measured:
        assert p.summarize(m) is None
        return
    throughput, elapsed = p.summarize(m)
    assert elapsed == pytest.approx(sum(measured))
    assert throughput == pytest.approx(96 * len(measured) / sum(measured))


@given(
    st.lists(st.floats(min_value=0.5, max_value=5000, allow_nan=False), min_size=2, max_size=30),
    st.integers(min_value=1, max_value=500),
    st.integers(min_value=0, max_value=3),
    st.booleans(),
)
def test_a_log_printing_every_n_steps_counts_the_steps_it_reports(rates, every, warm, from_0):
    """Issue 51: a line every N steps (counted from 1, or from 0) is N steps of work, not
    one: the time measured is each line's N steps over its rate, whatever N and warm-up."""
    first = every - 1 if from_0 else every
    lines = [f"step {first + i * every} throughput {r!r} images/s" for i, r in enumerate(rates)]
    p = Patterns(
        {"throughput": r"throughput ([0-9.e+-]+) images/s$", "step": r"^step (\d+)",
         "warmup_lines": warm},
        units_per_step=64,
        devices=1,
    )  # fmt: skip
    m = p.read(lines)
    measured = rates[warm:]
    if not measured:
        assert p.summarize(m) is None
        return
    # counted from 0 with no warm-up, the first line covers steps 0 to N-1: one fewer
    short = int(from_0 and not warm and every > 1)
    assert m.covered == [every - short] + [every] * (len(measured) - 1)
    throughput, elapsed = p.summarize(m)
    # (exactly: a bound relative to the total failed where the short first line was the
    # slowest, rates [1, 3, 7] every 2 steps, on 3.13's run of 2026-11-29)
    assert elapsed == pytest.approx(sum(n * 64 / r for n, r in zip(m.covered, measured)))
    assert throughput == pytest.approx(64 * sum(m.covered) / elapsed)
    # without the step pattern, the same lines are one step each
    one = Patterns({"throughput": p.log["throughput"], "warmup_lines": warm}, 64, 1).read(lines)
    assert one.covered == [1] * len(measured)


async def test_every_throughput_shown_names_the_declared_unit(tmp_path):
    """tokens/s is not images/s, wherever a declared framework's throughput is shown: the
    status table, check's verdicts and the TUI's Queue (Results and reports: test_custom_runs
    and test_report)."""
    from test_store import line

    from dlscale.engine.session import Session
    from dlscale.engine.tracking.store import Store
    from dlscale.tui.app import DlscaleApp
    from test_tui import until
    from tui_text import screen_text

    home = tmp_path / "home"
    store = Store(home)
    text = spec_text(extra='unit = "tokens"').replace("repetitions = 1", "repetitions = 2")
    for name in ("base", "c"):  # a baseline, and the study checked against it
        spec = tmp_path / f"{name}.toml"
        spec.write_text(text.replace('name = "c"', f'name = "{name}"'))
        runs = plan(load_spec(spec)).runs
        store.add_runs(runs)
        store.save_experiment(name, str(spec), spec.read_text(), "0" * 12)
        for i, run in enumerate(runs):
            path = tmp_path / f"{run.run_id}.jsonl"
            fields = {"timed_steps": 10, "warmup_steps": 1, "elapsed_s": 1.0}
            summary = line("summary", status="completed", throughput=1000.0 + i % 2, **fields)
            path.write_text(summary)
            store.records.ingest(run.run_id, path)
            store.update_run(run.run_id, state="COMPLETED")
    shown = dlscale("status", "--all", home=home, check=0).stdout
    head = next(x for x in shown.splitlines() if x.startswith("run "))
    assert "tokens/s" in head and "images/s" not in shown, shown
    # Two repetitions a side are too few to judge (exit 3, saying so); the unit is named.
    verdicts = dlscale("check", str(spec), "--baseline", "base", home=home, check=3).stdout
    assert "1,000.5 against 1,000.5 tokens/s" in verdicts and "images/s" not in verdicts
    assert "too few repetitions to judge" in verdicts and "not yet" not in verdicts
    assert "1x2 b4 fp32 native seq_len=32:" in verdicts  # each axis value a point of its own
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("f3")
        await until(pilot, lambda: "COMPLETED" in screen_text(app), what="the runs")
        screen = screen_text(app)
        assert "tokens/s" in screen and "images/s" not in screen, screen


def test_a_declared_frameworks_comm_benchmark_is_planned_where_it_gives_its_size(tmp_path):
    """With [frameworks.NAME.comm]: one benchmark per scale of 2+ devices (not per axis
    value), the declared launcher and software, dlscale's PyTorch trainer timing the
    declared gradient; without it, the plan says how to get one."""
    from dlscale.engine.launching.plan import plan as make_plan

    extra = 'launcher = "torchrun"\ncomm = { parameters = 5000 }'
    text = spec_text(extra=extra).replace(
        "repetitions = 1", "comm_benchmark = true\nrepetitions = 1"
    )
    spec = tmp_path / "s.toml"
    spec.write_text(text)
    planned = make_plan(load_spec(spec))
    bench = [r for r in planned.runs if r.comm_benchmark]
    assert [(r.scale, r.framework) for r in bench] == [("1x2", "gpt")]
    custom = bench[0].training["custom"]
    assert custom["launcher"] == "torchrun" and custom["log"] is None
    assert custom["command"][:4] == [
        "{python}",
        "-m",
        "dlscale.trainers.torch_ddp",
        "--comm-benchmark",
    ]
    assert custom["command"][-2:] == ["--gradient-elements", "5000"]
    argv = custom_launch.rank_command(bench[0], tmp_path / "run", "cpu", "/venv/bin/python", None)
    assert argv[0] == "/venv/bin/python" and "{" not in " ".join(argv)
    assert not [n for n in planned.notes if "none for gpt" in n]
    spec.write_text(text.replace("comm = { parameters = 5000 }", ""))
    planned = make_plan(load_spec(spec))
    assert not [r for r in planned.runs if r.comm_benchmark]
    [note] = [n for n in planned.notes if "none for gpt" in n]
    assert "[frameworks.gpt.comm] parameters = N" in note


@pytest.mark.parametrize(
    "training,unit",
    [
        ('{"custom": {"unit": "tokens"}}', "tokens"),
        ('{"custom": {"command": ["x"]}}', "samples"),  # a declaration's default
        ('{"steps": 3}', "images"),  # a built-in trainer's run
        ('{"custom": "not a table"}', "images"),
        ("not JSON at all", "images"),  # a damaged store
    ],
)
def test_the_queues_unit_is_the_one_results_give(tmp_path, training, unit):
    """The queue reads a run's unit in SQL (one expression over 10,000 rows a refresh), the
    results from the decoded recipe (points.unit_and_axes): the two must agree."""
    import sqlite3

    from dlscale.engine.results.points import unit_and_axes
    from dlscale.engine.tracking import queue
    from dlscale.engine.tracking.store import Store

    store = Store(tmp_path / "home")
    [run] = plan(_loaded(tmp_path)).runs[:1]
    store.add_runs([run])
    store.close()
    conn = sqlite3.connect(tmp_path / "home" / "dlscale.db")
    conn.execute("UPDATE runs SET training = ?", (training,))
    conn.commit()
    conn.close()
    store = Store(tmp_path / "home")
    [row] = queue.rows(store)
    assert row.unit == unit == unit_and_axes(store.run(run.run_id))[0]


# Where a built-in name is the only right answer, not a filter over the store's runs: the
# environments dlscale builds, and the datasets it fetches or checks.
BUILT_IN_ONLY = {("env", "create"), ("env", "remove"), ("doctor",)}
BUILT_IN_ONLY |= {("data", "fetch"), ("data", "check"), ("data", "sample")}
FILTERED = {"model": "gpt2-tiny", "dataset": "synthetic-tokens", "framework": "gpt"}
# Options so named that filter nothing: project's --model is the gradient of stated figures,
# a model dlscale knows the size of (a declared one's is given with --parameters).
NOT_FILTERS = {(("project",), "model")}


def test_every_filter_by_model_dataset_or_framework_takes_the_stores_declared_names(
    capsys, tmp_path, home
):
    """Issue 37, item 2, as a class: every option of every command (walked from the click
    tree) that names a model, dataset or framework takes a declared framework's own words
    from the store, and refuses one the store lacks naming those it has; a parameter limited
    to the built-in names is one of the few where only those make sense."""
    from test_bad_input import COMMANDS, invoke

    from dlscale.engine.config.frameworks import FRAMEWORKS
    from dlscale.engine.tracking.store import Store
    from dlscale.trainers.common.args import DATASETS, MODELS

    built_in = {*MODELS, *DATASETS, *FRAMEWORKS}
    assert {path for path, _ in COMMANDS} >= BUILT_IN_ONLY
    for path, cmd in COMMANDS:
        for p in cmd.params:
            choices = set(getattr(p.type, "choices", ()) or ())
            if choices and choices <= built_in and path not in BUILT_IN_ONLY:
                raise AssertionError(f"{' '.join(path)} {p.name}: only built-in names")
    named = [
        (path, p)
        for path, cmd in COMMANDS
        for p in cmd.params
        if isinstance(p, click.Option) and p.name in FILTERED
    ]
    filters = [(path, p) for path, p in named if getattr(p.callback, "stored", None) == p.name]
    others = {(path, p.name) for path, p in named} - {(path, p.name) for path, p in filters}
    assert others == NOT_FILTERS, others  # a new one filters the store, or says why not
    assert {(" ".join(path), p.name) for path, p in filters} >= {("chart", "model")}
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text())
    Store(home).add_runs(plan(load_spec(spec)).runs)
    for path, p in filters:
        flag = max(p.opts, key=len)
        code, out, err = invoke(capsys, *path, flag, FILTERED[p.name])
        assert code == 0 and "Error" not in err, (path, flag, code, out, err)
        code, out, err = invoke(capsys, *path, flag, "resnet20")
        assert code == 2 and f"it has: {FILTERED[p.name]}" in err, (path, flag, err)

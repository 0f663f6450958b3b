import pytest

from conftest import dlscale, write_spec
from dlscale.engine.config.spec import load_spec
from dlscale.engine.launching.plan import plan
from dlscale.trainers.common.flags import KNOBS, TRAINING


def test_matrix_expands_and_ids_are_stable(tmp_path):
    path = write_spec(tmp_path / "a.toml", "repetitions = 3", "")
    path.write_text(path.read_text().replace("repetitions = 1\n", ""))
    runs = plan(load_spec(path)).runs
    assert len(runs) == 2 * 3  # scales x repetitions
    assert len({r.run_id for r in runs}) == 6
    assert len({r.point_id for r in runs}) == 2
    again = plan(load_spec(path)).runs
    assert [r.run_id for r in runs] == [r.run_id for r in again]


def test_ids_follow_what_determines_the_result(tmp_path):
    base = {r.run_id for r in plan(load_spec(write_spec(tmp_path / "a.toml"))).runs}
    # a description is not a parameter
    desc = write_spec(tmp_path / "b.toml", 'description = "same runs, other words"')
    assert {r.run_id for r in plan(load_spec(desc)).runs} == base
    # the number of steps is
    steps = write_spec(tmp_path / "c.toml", steps=5)
    assert not {r.run_id for r in plan(load_spec(steps)).runs} & base


def test_a_knob_added_later_leaves_the_ids_of_specs_without_it_alone(tmp_path):
    """The quickstart's ids as stores hold them (pinned at 2026-11-27): a new knob that
    changed every run's id would make every stored run look unrun."""
    # (the training runs': the communication benchmark the quickstart added since is a run
    # of its own, beside them)
    ids = sorted(
        r.run_id for r in plan(load_spec("examples/quickstart.toml")).runs if not r.comm_benchmark
    )
    assert ids == [
        "010b72785172",
        "2bfc6bbdb637",
        "4b75ba1fc982",
        "5837e1d803ce",
        "8351e32b3688",
        "e90eae4153f9",
    ]
    late = [k.name for k in TRAINING if k.in_id_when_set]
    assert "breakdown_pairs" in late
    # set, it is part of the recipe: those runs measure something else
    spec = write_spec(tmp_path / "a.toml")
    base = {r.run_id for r in plan(load_spec(spec)).runs}
    set_ = write_spec(tmp_path / "b.toml", "", "breakdown_pairs = 0")
    assert not {r.run_id for r in plan(load_spec(set_)).runs} & base


def test_strong_scaling_splits_the_global_batch(tmp_path):
    path = write_spec(tmp_path / "s.toml", 'scaling = "strong"\nglobal_batch = [16]')
    path.write_text(path.read_text().replace("per_device_batch = [8]\n", ""))
    runs = plan(load_spec(path)).runs
    assert [(r.devices, r.per_device_batch, r.global_batch) for r in runs] == [
        (1, 16, 16),
        (2, 8, 16),
    ]


def test_models_pair_only_with_fitting_data(tmp_path):
    path = write_spec(tmp_path / "m.toml")
    path.write_text(
        path.read_text()
        .replace('["resnet20"]', '["resnet20", "resnet50"]')
        .replace('["synthetic-cifar"]', '["synthetic-cifar", "synthetic-imagenet"]')
    )
    p = plan(load_spec(path))
    assert {(r.model, r.dataset) for r in p.runs} == {
        ("resnet20", "synthetic-cifar"),
        ("resnet50", "synthetic-imagenet"),
    }
    assert sorted(p.skipped_pairs) == [
        ("resnet20", "synthetic-imagenet"),
        ("resnet50", "synthetic-cifar"),
    ]


def test_framework_options_reach_only_their_frameworks_runs_and_trainer(tmp_path):
    from dlscale.engine.launching.launch import trainer_args

    path = write_spec(tmp_path / "s.toml")
    path.write_text(
        path.read_text().replace('"pytorch-ddp"', '"pytorch-ddp", "deepspeed", "horovod-pytorch"')
    )
    before = {r.run_id: r for r in plan(load_spec(path)).runs}
    # Spelling out a default changes nothing: the same runs, found again by their ids.
    path.write_text(path.read_text() + "\n[options.deepspeed]\nzero_stage = 1\n")
    assert {r.run_id for r in plan(load_spec(path)).runs} == set(before)
    path.write_text(
        path.read_text().replace("zero_stage = 1", "zero_stage = 2")
        + "[options.horovod-pytorch]\nfp16_allreduce = true\n"
    )
    after = plan(load_spec(path)).runs
    for run in after:
        args = trainer_args(run)
        if run.framework == "pytorch-ddp":
            assert run.run_id in before  # untouched
            assert "--zero-stage" not in args and "--fp16-allreduce" not in args
        else:
            assert run.run_id not in before  # a different run: it trains differently
        if run.framework == "deepspeed":
            assert args[args.index("--zero-stage") + 1] == "2"
            assert "--fp16-allreduce" not in args
        if run.framework == "horovod-pytorch":
            assert "--fp16-allreduce" in args and "--zero-stage" not in args


@pytest.mark.parametrize("knob", [k.name for k in TRAINING])
def test_every_training_knob_reaches_the_trainer_as_the_spec_says(knob):
    """One table makes the spec's model, the trainer's parser and the launch arguments: a
    value other than the default, set in a run's [training], is what the trainer parses."""
    from test_store import make_run

    from dlscale.engine.launching.launch import trainer_args
    from dlscale.trainers.common.args import build_parser

    k = KNOBS[knob]
    value = {
        "int": 3,
        "number": 0.25,
        "bool": True,
        "str": "/data/x",
        "choice": (k.choices[-1] if k.choices else None),
    }[k.kind]
    if k.pattern:
        value = "crash@step3"
    training = {"steps": 4} if knob != "steps" else {}
    if knob == "epochs":
        training = {}
    training[knob] = value
    args = build_parser("t").parse_args(trainer_args(make_run(training=training)))
    assert getattr(args, k.dest) == value


@pytest.mark.framework  # plans pytorch-ddp: `dlscale plan` needs torch where dlscale runs
def test_plan_and_the_build_screen_count_a_study_the_same_way(tmp_path):
    """Issue 48, item 4: one home for a plan's totals. `dlscale plan` counted queued and
    running runs as "still to run" where the Build screen (issue 47) set them apart; both
    now say plan.Totals' words, for every mix of states a store can hold."""
    import itertools

    from dlscale.engine.config.toml_text import tomllib
    from dlscale.engine.launching.plan import Totals
    from dlscale.engine.runs import State
    from dlscale.engine.session import Session
    from dlscale.engine.tracking.store import Store

    spec = write_spec(tmp_path / "s.toml", scales='"1x1", "1x2"')
    spec.write_text(spec.read_text().replace("repetitions = 1", "repetitions = 2"))
    data = tomllib.loads(spec.read_text())
    loaded = load_spec(spec)
    runs = plan(loaded).runs
    home = tmp_path / "home"
    store = Store(home)
    session = Session(home, "local")
    mixes = itertools.product(
        [None, State.COMPLETED, State.RUNNING, State.PENDING, State.FAILED], repeat=2
    )
    for i, mix in enumerate(mixes):
        states = {r.run_id: s for r, s in zip(runs, mix) if s}
        totals = plan(loaded).against(states)
        assert isinstance(totals, Totals)
        assert totals.runs == len(runs) == len(totals.to_run) + totals.active + totals.completed
        assert totals.completed == list(states.values()).count(State.COMPLETED)
        # the store holding those states: `dlscale plan` and the Build screen's preview say
        for r in runs:
            if i == 0:
                store.add_run(r)
            store.update_run(r.run_id, state=states.get(r.run_id, State.PLANNED))
        preview = session.preview(data, str(spec))
        assert preview.totals is not None, preview.problems
        assert preview.totals.words() == totals.words(), i
        if i % 6 == 0:  # the command line's too, on a sample of the mixes (a process each)
            said = dlscale("plan", str(spec), home=home, check=0).stdout
            assert totals.words() in " ".join(said.split()), (i, said)
            # and the table's "to run" column counts the same runs, group by group
            head, *body = [
                [c.strip() for c in line.split("│" if "│" in line else "┃")[1:-1]]
                for line in said.splitlines()
                if line.startswith(("│", "┃"))
            ]
            column = head.index("to run")
            assert sum(int(row[column]) for row in body) == len(totals.to_run), (i, said)
    store.close()

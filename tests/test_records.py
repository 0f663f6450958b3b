import json

import pytest

from dlscale.trainers.common.records import KINDS, RecordError, RecordWriter, parse_record


def test_writer_round_trip_in_order(tmp_path):
    path = tmp_path / "m.jsonl"
    with RecordWriter(str(path)) as w:
        w.write(
            "params", framework="f", model="resnet20", dataset="d", per_device_batch=8, world_size=2
        )
        w.write(
            "env",
            framework_versions={"torch": "x"},
            hostnames=["a", "b"],
            devices=["cpu", "cpu"],
            world_size=2,
            dlscale_version="0",
        )
        w.write("interval", step=10, images_per_s=5.0, loss=1.0)
        w.write("eval", step=10, epoch=1, top1=0.5, elapsed_s=1.0)
        w.write(
            "summary",
            status="completed",
            throughput=5.0,
            timed_steps=10,
            warmup_steps=1,
            elapsed_s=2.0,
        )
    records = [parse_record(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in records] == list(KINDS)
    assert all(r["schema"] == 1 and isinstance(r["time"], float) for r in records)
    assert records[1]["hostnames"] == ["a", "b"]


def test_only_rank_zero_writes(tmp_path):
    path = tmp_path / "m.jsonl"
    w = RecordWriter(str(path), enabled=False)
    w.write("interval", step=1, images_per_s=1.0, loss=0.1)
    w.close()
    assert not path.exists()


def test_writer_refuses_incomplete_records(tmp_path):
    w = RecordWriter(str(tmp_path / "m.jsonl"))
    with pytest.raises(RecordError, match="summary record lacks throughput"):
        w.write("summary", status="completed", timed_steps=1, warmup_steps=0, elapsed_s=1.0)
    with pytest.raises(RecordError, match="unknown record kind"):
        w.write("bogus")


@pytest.mark.parametrize(
    "line,message",
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"kind": "interval", "step": 1}), "lacks images_per_s, loss"),
        (json.dumps({"kind": "weird"}), "unknown record kind"),
    ],
)
def test_parse_rejects_bad_lines(line, message):
    with pytest.raises(RecordError, match=message):
        parse_record(line)


def _record(kind, **over):
    base = {
        "params": dict(
            framework="f", model="resnet20", dataset="d", per_device_batch=8, world_size=2
        ),
        "env": dict(
            framework_versions={"torch": "x"},
            hostnames=["a"],
            devices=["cpu"],
            world_size=1,
            dlscale_version="0",
        ),
        "interval": dict(step=10, images_per_s=5.0, loss=1.0),
        "eval": dict(step=10, epoch=1, top1=0.5, elapsed_s=1.0),
        "summary": dict(
            status="completed", throughput=5.0, timed_steps=10, warmup_steps=1, elapsed_s=2.0
        ),
    }[kind]
    return json.dumps({"kind": kind, "schema": 1, "time": 0.0, **base, **over})


# Records are trusted by type, not shape: each of these has every required field, and each
# would crash or poison a table, a chart or a sum downstream.
@pytest.mark.parametrize(
    "kind,field,value,message",
    [
        ("interval", "images_per_s", "abc", "interval.images_per_s is 'abc', not a finite number"),
        ("interval", "images_per_s", None, "interval.images_per_s is null"),
        ("interval", "images_per_s", float("nan"), "interval.images_per_s is NaN"),
        ("interval", "images_per_s", True, "interval.images_per_s is True"),
        (
            "interval",
            "images_per_s",
            -3.0,
            "interval.images_per_s is -3.0, not a finite number >= 0",
        ),
        ("interval", "step", 2.5, "interval.step is 2.5, not a whole number"),
        ("interval", "step", "7", "interval.step is '7', not a whole number"),
        ("interval", "loss", float("inf"), "interval.loss is Infinity, not a finite number"),
        ("summary", "throughput", float("nan"), "summary.throughput is NaN"),
        ("summary", "throughput", None, "summary.throughput is null"),
        ("summary", "throughput", [1.0], "summary.throughput is [1.0]"),
        ("summary", "time_to_accuracy_s", "fast", "summary.time_to_accuracy_s is 'fast'"),
        ("summary", "best_top1", 3.0, "summary.best_top1 is 3.0, not a number from 0 to 1"),
        ("summary", "status", 1, "summary.status is 1, not a string"),
        ("eval", "top1", "high", "eval.top1 is 'high'"),
        ("params", "per_device_batch", "8", "params.per_device_batch is '8', not a whole number"),
        ("params", "model", None, "params.model is null, not a string"),
        ("env", "hostnames", "node1", "env.hostnames is 'node1', not a list"),
        ("env", "devices", None, "env.devices is null, not a list"),
        ("interval", "time", "noon", "interval.time is 'noon', not a finite number"),
    ],
)
def test_parse_checks_field_types(kind, field, value, message):
    with pytest.raises(RecordError) as err:
        parse_record(_record(kind, **{field: value}))
    assert message in str(err.value)


@pytest.mark.parametrize(
    "kind,over",
    [
        ("summary", dict(time_to_accuracy_s=None, best_top1=None, target_accuracy=None)),
        ("summary", dict(throughput=0, total_wall_s=3)),  # ints are numbers
        ("interval", dict(epoch=None, includes_warmup=True)),
        ("env", dict(job_id=None, launcher="srun", nodes=["a"])),
        ("params", dict(steps=None, epochs=3, lr=0.1)),
        ("eval", dict(top1=1)),
    ],
)
def test_parse_accepts_what_trainers_write(kind, over):
    assert parse_record(_record(kind, **over))["kind"] == kind


def test_versions_a_library_gives_as_numbers_are_written_as_text(tmp_path, monkeypatch):
    # torch.backends.cudnn.version() is 91900, an int: the H100 proof's store skipped every
    # GPU run's env record for it. Both writers of env records turn versions into text.
    from dlscale.trainers.report import Reporter

    monkeypatch.setenv("DLSCALE_METRICS", str(tmp_path / "m.jsonl"))
    Reporter().start(framework_versions={"torch": "2.11.0", "cudnn": 91900, "nccl": None})
    env = [parse_record(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()][1]
    assert env["framework_versions"] == {"torch": "2.11.0", "cudnn": "91900", "nccl": None}

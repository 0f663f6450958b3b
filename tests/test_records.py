import json

import pytest

from dlscale.trainers.common.records import KINDS, RecordError, RecordWriter, parse_record


def test_writer_round_trip_in_order(tmp_path):
    path = tmp_path / "m.jsonl"
    with RecordWriter(str(path)) as w:
        w.write("params", framework="f", model="resnet20", dataset="d", per_device_batch=8,
                world_size=2)
        w.write("env", framework_versions={"torch": "x"}, hostnames=["a", "b"],
                devices=["cpu", "cpu"], world_size=2, dlscale_version="0")
        w.write("interval", step=10, images_per_s=5.0, loss=1.0)
        w.write("eval", step=10, epoch=1, top1=0.5, elapsed_s=1.0)
        w.write("summary", status="completed", throughput=5.0, timed_steps=10,
                warmup_steps=1, elapsed_s=2.0)
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


@pytest.mark.parametrize("line,message", [
    ("not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"kind": "interval", "step": 1}), "lacks images_per_s, loss"),
    (json.dumps({"kind": "weird"}), "unknown record kind"),
])
def test_parse_rejects_bad_lines(line, message):
    with pytest.raises(RecordError, match=message):
        parse_record(line)

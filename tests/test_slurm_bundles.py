"""A bundle from the Slurm test cluster (22.05) and one from this machine's local backend,
imported into a third store and compared side by side. Slow: 4 Slurm jobs and 4 local
runs of a 6-step study (about 3 minutes on 2 cores)."""

import json

import pytest
from test_slurm_cluster import profile_copy

from conftest import dlscale, write_spec
from dlscale.engine.tracking.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def test_a_slurm_bundle_and_a_local_one_side_by_side_in_a_third_store(
    slurm_22_05, tmp_path, monkeypatch
):
    for name, value in slurm_22_05.env.items():
        monkeypatch.setenv(name, value)
    more = "repetitions = 2"
    on_slurm = write_spec(
        tmp_path / "slurm.toml", more, name="sites", scales='"1x1", "2x1"', steps=6
    )
    here = write_spec(tmp_path / "here.toml", more, name="sites", scales='"1x1", "1x2"', steps=6)
    for spec in (on_slurm, here):
        spec.write_text(spec.read_text().replace("repetitions = 1\n", ""))
    cluster_home, local_home, third = tmp_path / "cluster", tmp_path / "local", tmp_path / "third"
    dlscale(
        "run",
        str(on_slurm),
        "--profile",
        str(profile_copy(tmp_path)),
        "--backend",
        "slurm",
        "--wait",
        home=cluster_home,
        check=0,
    )
    dlscale("run", str(here), "--wait", home=local_home, check=0)
    bundles = {}
    for name, home in (("cluster", cluster_home), ("local", local_home)):
        bundles[name] = tmp_path / f"{name}.tar.gz"
        dlscale("export", "bundle", "--out", str(bundles[name]), home=home, check=0)
        dlscale("import", str(bundles[name]), home=third, check=0)
    store = Store(third)
    names = store.experiment_names()
    store.close()
    # the site is the cluster profile's name on Slurm, this host's on the local backend
    assert "sites@test-cluster" in names and len(names) == 2
    local = next(n for n in names if n != "sites@test-cluster")
    data = json.loads(
        dlscale(
            "compare", local, "sites@test-cluster", "--format", "json", home=third, check=0
        ).stdout
    )
    assert data["sites"][1] == "test-cluster"
    matched = [r for r in data["rows"] if r["matched"]]
    assert [(r["nodes"], r["ranks_per_node"]) for r in matched] == [(1, 1)]
    assert matched[0]["a"]["n"] == matched[0]["b"]["n"] == 2
    assert matched[0]["ratio_low"] is not None and matched[0]["p_value"] is not None
    alone = sorted(
        (r["nodes"], r["ranks_per_node"], r["a"] is None) for r in data["rows"] if not r["matched"]
    )
    assert alone == [(1, 2, False), (2, 1, True)]
    # what the env records say differs: the Slurm run's nodes are node1/node2
    assert "nodes" in data["env_differences"]
    table = dlscale("compare", local, "sites@test-cluster", home=third, check=0).stdout
    assert "only in B (sites@test-cluster)" in table

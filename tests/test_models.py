import pytest
import torch

from dlscale.trainers.torch_ddp.models import build, parameter_count


@pytest.mark.parametrize(
    "name,classes,millions",
    [
        ("resnet20", 10, 0.27),
        ("resnet32", 10, 0.46),
        ("resnet44", 10, 0.66),
        ("resnet56", 10, 0.85),
        ("resnet110", 10, 1.73),
        ("resnet50", 1000, 25.56),
        ("resnet101", 1000, 44.55),
        ("resnet152", 1000, 60.19),
    ],
)
def test_parameter_counts_match_the_papers(name, classes, millions):
    assert round(parameter_count(build(name, classes)) / 1e6, 2) == millions


def test_forward_shapes():
    assert build("resnet20", 10)(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert build("resnet50", 1000)(torch.zeros(1, 3, 224, 224)).shape == (1, 1000)

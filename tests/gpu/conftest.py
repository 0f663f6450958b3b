"""The GPU tier: runs where a CUDA device is visible, skips with the reason elsewhere (the
test command stays green on CPU machines and in CI, which has no GPU)."""
import pytest


def _cuda() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"no CUDA device visible to torch {torch.__version__}"
    return None


def pytest_collection_modifyitems(config, items):
    why = _cuda()
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if why:
                item.add_marker(pytest.mark.skip(reason=f"GPU tier: {why}"))

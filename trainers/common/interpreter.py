"""What software a Python interpreter holds: its version and its key libraries' (torch,
numpy, TensorFlow, JAX, DeepSpeed, Horovod, MXNet, DALI, CUDA, cuDNN, NCCL...), as an env
record's framework_versions holds them.

The meter around a declared framework's script (metered.py) runs this file's text with
`PYTHON -c` in the interpreter the script runs in (its venv's, a container's python3, the
profile's), so what is recorded is what the script ran with. It reads the installed
distributions' metadata and torch's version.py, importing none of them: fast, and nothing
of a library (CUDA, a GPU) starts. Standard library only, and Python 3.6's syntax: it runs
in whatever Python the script's environment has.
"""

import ast
import json
import sys

# An env record's name for a library: the distributions that carry it (the first found).
NAMES = {
    "torch": ("torch",),
    "torchvision": ("torchvision",),
    "numpy": ("numpy",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly"),
    "keras": ("keras",),
    "jax": ("jax",),
    "jaxlib": ("jaxlib",),
    "deepspeed": ("deepspeed",),
    "horovod": ("horovod",),
    "transformers": ("transformers",),
    "accelerate": ("accelerate",),
    "lightning": ("lightning", "pytorch-lightning"),
}
# Names whose distributions carry the CUDA release in theirs (nvidia-cudnn-cu12, mxnet-cu112).
PREFIXES = {
    "cudnn": "nvidia-cudnn-cu",
    "nccl": "nvidia-nccl-cu",
    "dali": "nvidia-dali-",
    "mxnet": "mxnet",
}


def _installed():
    """{distribution name (lower case, - for _): version} of this interpreter's path."""
    try:
        from importlib import metadata
    except ImportError:  # Python before 3.8: no metadata to read without importing
        return {}
    out = {}
    for dist in metadata.distributions():
        try:
            name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        except Exception:  # a broken distribution's metadata: not a version
            continue
        if name and name not in out:
            out[name] = dist.version
    return out


def _torch_cuda():
    """The CUDA release torch was built for, from its version.py, without importing torch."""
    try:
        from importlib.util import find_spec

        spec = find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return None
        folder = list(spec.submodule_search_locations)[0]
        with open(folder + "/version.py", encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except Exception:  # no torch, or a version.py that is not what torch writes
        return None
    for node in tree.body:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if getattr(target, "id", None) == "cuda" and getattr(node, "value", None) is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return str(value) if value else None
    return None


def versions():
    """{name: version} of the interpreter and the key libraries it holds."""
    out = {"python": sys.version.split()[0]}
    installed = _installed()
    for name, dists in NAMES.items():
        found = next((installed[d] for d in dists if d in installed), None)
        if found:
            out[name] = found
    for name, prefix in PREFIXES.items():
        found = sorted(v for d, v in installed.items() if d.startswith(prefix))
        if found:
            out[name] = found[-1]
    cuda = _torch_cuda() if "torch" in out else None
    if cuda:
        out["cuda"] = cuda
    return out


if __name__ == "__main__":
    print(json.dumps(versions(), sort_keys=True))

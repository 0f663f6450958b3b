"""What each framework's environment holds: pinned recipes for CPU machines and for NVIDIA
GPUs, and the opt-in extras (DALI). Data only, and the digests that key the cache by it;
building them is envbuild.py, finding and checking them envs.py; what a recipe is made of,
recipe_steps.py."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...config.frameworks import taking
from ...errors import UserError
from .steps import Recipe, Step, WheelBuild

DEVICES = ("cpu", "cuda")
TORCH = "torch==2.13.0"  # the CPU wheel on this site's disk; other pins pull multi-GB CUDA builds
# PyPI's torch 2.13.0 for Linux is its CUDA 13.0 build (cuda-toolkit 13.0.3, cuDNN 9.20, NCCL
# 2.29.7 as nvidia-* wheels). `===` matches that version string exactly: `==2.13.0` also
# matches 2.13.0+cpu, which pip prefers (a local label sorts higher) where a site's wheel
# folder holds it, as this one's does.
TORCH_CUDA = "torch===2.13.0"
# The trainers' energy meter reads NVML (trainers/common/energy.py); the 580 branch's
# bindings (the driver CUDA 13 needs) call only what older drivers have too.
NVML, NVML_DIST = "nvidia-ml-py==13.580.82", "nvidia-ml-py"


_DATA = ("numpy", "scikit-learn>=1.3")  # scikit-learn: the bundled digits dataset
# The PyTorch family's ImageNet reader decodes JPEGs with Pillow (torchvision is not used:
# its wheel pulls a CUDA torch). Not in _DATA: TensorFlow and MXNet read no JPEGs.
_IMAGES = ("pillow>=9.1",)
_HOROVOD_BUILD = ("cloudpickle", "psutil", "pyyaml", "packaging", "setuptools<80", "wheel")
_HOROVOD_CPU = (
    ("HOROVOD_WITH_GLOO", "1"),
    ("HOROVOD_WITHOUT_MPI", "1"),
    ("HOROVOD_WITHOUT_MXNET", "1"),
    ("MAKEFLAGS", "-j2"),
)
# The op built by the environment's own ninja, which the trainer also uses (see its init).
_DEEPSPEED_WARM = (
    "import os, sys; os.environ['DS_ACCELERATOR'] = 'cpu'; "
    "os.environ['TORCH_EXTENSIONS_DIR'] = os.path.join(sys.prefix, "
    "'torch_extensions'); os.environ['PATH'] = os.path.dirname(sys.executable) + os.pathsep "
    "+ os.environ.get('PATH', ''); from deepspeed.accelerator import get_accelerator; "
    "get_accelerator().create_op_builder('ShareMemCommBuilder').load()"
)
RECIPES: dict[str, Recipe] = {
    r.framework: r
    for r in (
        Recipe("pytorch-ddp", (Step((TORCH, *_DATA, *_IMAGES)),), ("torch",), ("torch", "numpy")),
        # FSDP2 and tensor parallelism are torch's own: the same environment as DDP's.
        Recipe("pytorch-fsdp", (Step((TORCH, *_DATA, *_IMAGES)),), ("torch",), ("torch", "numpy")),
        # DS_BUILD_OPS=0: no CUDA extension is compiled at install time (none is needed on CPU,
        # and on GPU DeepSpeed builds the few it uses just in time).
        Recipe(
            "deepspeed",
            (Step((TORCH, "deepspeed==0.19.8", *_DATA, *_IMAGES), env=(("DS_BUILD_OPS", "0"),)),),
            ("torch", "deepspeed"),
            ("deepspeed", "torch", "numpy"),
            # The trainer looks for built ops in sys.prefix/torch_extensions (see its init).
            warm=_DEEPSPEED_WARM,
        ),
        # Horovod has no wheels on PyPI: built from source against the torch beside it, with
        # gloo (no MPI needed: under Slurm the trainer runs the rendezvous itself).
        Recipe(
            "horovod-pytorch",
            (
                Step((TORCH, *_DATA, *_IMAGES, *_HOROVOD_BUILD)),
                WheelBuild(
                    "horovod==0.28.1",
                    "horovod-0.28.1-torch2.13.0",
                    (
                        ("HOROVOD_WITH_PYTORCH", "1"),
                        *_HOROVOD_CPU[:2],
                        ("HOROVOD_WITHOUT_TENSORFLOW", "1"),
                        *_HOROVOD_CPU[2:],
                    ),
                    cxx_std="c++17",
                ),
            ),
            ("torch", "horovod.torch"),
            ("horovod", "torch", "numpy"),
        ),
        # Horovod 0.28.1 does not build against TensorFlow >= 2.16 (horovod#4290; the fix,
        # horovod#4302, is unmerged), so TensorFlow 2.15.1, the last it builds against: its
        # tf.keras is still Keras 2 (no tf_keras needed), and it needs numpy < 2.
        Recipe(
            "horovod-tensorflow",
            (
                Step(("tensorflow-cpu==2.15.1", "numpy<2", *_DATA[1:], *_HOROVOD_BUILD)),
                WheelBuild(
                    "horovod==0.28.1",
                    "horovod-0.28.1-tf2.15.1",
                    (
                        ("HOROVOD_WITH_TENSORFLOW", "1"),
                        *_HOROVOD_CPU[:2],
                        ("HOROVOD_WITHOUT_PYTORCH", "1"),
                        *_HOROVOD_CPU[2:],
                    ),
                    cxx_std="c++17",
                ),
            ),
            ("tensorflow", "horovod.tensorflow"),
            ("horovod", "tensorflow-cpu", "numpy"),
        ),
        # tf_keras beside TensorFlow without its dependencies (they are TensorFlow's own): Keras
        # 3's model code fails under MultiWorkerMirroredStrategy (keras#20585).
        Recipe(
            "tensorflow",
            (Step(("tensorflow-cpu==2.21.0", *_DATA)), Step(("tf_keras==2.21.0",), ("--no-deps",))),
            ("tensorflow", "tf_keras"),
            ("tensorflow-cpu", "tf_keras", "numpy"),
        ),
        # MXNet 1.9.1's wheel is py3-none (a ctypes library), so it installs on Python 3.11; it
        # needs numpy<1.24 (np.bool and friends), and a scikit-learn that still takes that numpy.
        Recipe(
            "mxnet",
            (Step(("mxnet==1.9.1", "numpy==1.23.5", "scikit-learn==1.5.2")),),
            ("mxnet",),
            ("mxnet", "numpy"),
        ),
    )
}

# Horovod's GPU build: NCCL for every GPU collective, linked shared so the process uses the
# one NCCL its framework loaded. Where CUDA and NCCL are comes from the site (its modules set
# these, or the user does); HOROVOD_BUILD_CUDA_CC_LIST defaults to the profile's gpu_arch.
_HOROVOD_GPU = (
    ("HOROVOD_GPU", "CUDA"),
    ("HOROVOD_GPU_OPERATIONS", "NCCL"),
    ("HOROVOD_NCCL_LINK", "SHARED"),
)
HOROVOD_SITE_ENV = (
    "HOROVOD_CUDA_HOME",
    "CUDA_HOME",
    "HOROVOD_NCCL_HOME",
    "HOROVOD_NCCL_INCLUDE",
    "HOROVOD_NCCL_LIB",
    "HOROVOD_BUILD_CUDA_CC_LIST",
)


def _gpu_horovod(cpu: Step | WheelBuild, key: str) -> WheelBuild:
    assert isinstance(cpu, WheelBuild)  # the CPU recipe's Horovod step
    env = (
        tuple(kv for kv in cpu.env if kv[0] != "MAKEFLAGS") + _HOROVOD_GPU + (("MAKEFLAGS", "-j2"),)
    )
    return WheelBuild(cpu.requirement, key, env, cpu.cxx_std, site_env=HOROVOD_SITE_ENV)


# The GPU variant of each recipe (`dlscale env create FRAMEWORK --gpu`), cached apart from
# the CPU one. Every one holds nvidia-ml-py for the energy meter.
GPU_RECIPES: dict[str, Recipe] = {
    r.framework: r
    for r in (
        *(
            Recipe(
                name,
                (Step((TORCH_CUDA, *_DATA, *_IMAGES, NVML)),),
                ("torch",),
                ("torch", "numpy", NVML_DIST),
                device="cuda",
                cuda="13.0",
            )
            for name in ("pytorch-ddp", "pytorch-fsdp")
        ),
        # No warm-up op: on GPUs DeepSpeed communicates through NCCL, not its CPU op.
        Recipe(
            "deepspeed",
            (
                Step(
                    (TORCH_CUDA, "deepspeed==0.19.8", *_DATA, *_IMAGES, NVML),
                    env=(("DS_BUILD_OPS", "0"),),
                ),
            ),
            ("torch", "deepspeed"),
            ("deepspeed", "torch", "numpy", NVML_DIST),
            device="cuda",
            cuda="13.0",
        ),
        Recipe(
            "horovod-pytorch",
            (
                Step((TORCH_CUDA, *_DATA, *_IMAGES, *_HOROVOD_BUILD, NVML)),
                _gpu_horovod(
                    RECIPES["horovod-pytorch"].steps[1], "horovod-0.28.1-torch2.13.0-cu130"
                ),
            ),
            ("torch", "horovod.torch"),
            ("horovod", "torch", "numpy", NVML_DIST),
            device="cuda",
            cuda="13.0",
        ),
        # tensorflow[and-cuda] 2.15.1 pins CUDA 12.2, cuDNN 8.9.4 and NCCL 2.16.5 as nvidia-*
        # wheels; the same TensorFlow as the CPU recipe, for the same Horovod reason.
        Recipe(
            "horovod-tensorflow",
            (
                Step(
                    ("tensorflow[and-cuda]==2.15.1", "numpy<2", *_DATA[1:], *_HOROVOD_BUILD, NVML)
                ),
                _gpu_horovod(
                    RECIPES["horovod-tensorflow"].steps[1], "horovod-0.28.1-tf2.15.1-cu122"
                ),
            ),
            ("tensorflow", "horovod.tensorflow"),
            ("horovod", "tensorflow", "numpy", NVML_DIST),
            device="cuda",
            cuda="12.2",
        ),
        # tensorflow[and-cuda] 2.21.0: CUDA 12.5 or later 12.x, cuDNN 9, NCCL 2.27; tf_keras
        # without dependencies, as on CPU.
        Recipe(
            "tensorflow",
            (
                Step(("tensorflow[and-cuda]==2.21.0", *_DATA, NVML)),
                Step(("tf_keras==2.21.0",), ("--no-deps",)),
            ),
            ("tensorflow", "tf_keras"),
            ("tensorflow", "tf_keras", "numpy", NVML_DIST),
            device="cuda",
            cuda="12.x (12.5 or later)",
        ),
        # PyPI's newest CUDA build of MXNet 1.9.1 (CUDA 11.7, cuDNN and NCCL linked in). Its
        # kernels are SASS for sm_50, 60, 70, 80 and 86 with no PTX (MXNET_CUDA_ARCH in
        # config/distribution/linux_cu117.cmake; read back from the wheel's fatbins): it runs on
        # compute capability 5.x to 8.x, never on Hopper (9.0) or newer (engine/gpus.py).
        Recipe(
            "mxnet",
            (Step(("mxnet-cu117==1.9.1", "numpy==1.23.5", "scikit-learn==1.5.2", NVML)),),
            ("mxnet",),
            ("mxnet-cu117", "numpy", NVML_DIST),
            device="cuda",
            cuda="11.7",
        ),
    )
}


@dataclass(frozen=True)
class Extra:
    """An opt-in addition to a framework's environment, named after the loader it brings:
    too big for every environment (DALI's wheels are about 260 MB to download, 700 MB
    installed), so built only where asked (`dlscale env create FRAMEWORK --with NAME`)."""

    name: str
    step: Step
    imports: tuple[str, ...]
    versions: tuple[str, ...]

    def frameworks(self) -> list[str]:
        """The frameworks whose trainers use it."""
        return taking("loaders", self.name)

    @property
    def probe_recipe(self) -> Recipe:
        return Recipe(self.name, (), self.imports, self.versions)


# nvidia-dali-cuda130 runs CPU-only pipelines on machines without CUDA too; its wheel brings
# nvJPEG, nvImageCodec and nvCOMP wheels (used on GPUs only) but no CUDA runtime or torch.
EXTRAS: dict[str, Extra] = {
    e.name: e
    for e in (
        Extra(
            "dali",
            Step(("nvidia-dali-cuda130==2.4.0",)),
            ("nvidia.dali",),
            ("nvidia-dali-cuda130",),
        ),
    )
}


def recipe_for(
    framework: str,
    extras: tuple[str, ...] | list[str] = (),
    device: str = "cpu",
    modules: tuple[str, ...] | list[str] = (),
) -> Recipe:
    """The framework's recipe for `device` with the extras' steps after its own (so its
    digest, and the cache folder keyed by it, differ from the plain recipe's). `modules`:
    what a build loads first (a profile's CUDA and NCCL, a compiler); they key its compiled
    wheels."""
    base = (GPU_RECIPES if device == "cuda" else RECIPES)[framework]
    extras = tuple(sorted(set(extras)))
    for name in extras:
        if name not in EXTRAS:
            raise UserError(f"--with {name}: unknown; allowed: {', '.join(EXTRAS)}")
        if framework not in EXTRAS[name].frameworks():
            raise UserError(
                f"--with {name}: only for {', '.join(EXTRAS[name].frameworks())} "
                f"(the trainers that use it), not {framework}"
            )
    if device == "cuda" or modules:
        base = replace(
            base,
            modules=tuple(modules),
            steps=tuple(
                s.for_site(tuple(modules)) if isinstance(s, WheelBuild) else s for s in base.steps
            ),
        )
    if not extras:
        return base
    added = [EXTRAS[n] for n in extras]
    return replace(
        base,
        steps=base.steps + tuple(e.step for e in added),
        imports=base.imports + sum((e.imports for e in added), ()),
        versions=base.versions + sum((e.versions for e in added), ()),
        extras=extras,
    )

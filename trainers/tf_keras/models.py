"""The ResNet family in Keras 2, layer for layer the PyTorch definitions of
torch_ddp/models.py, so every framework trains the same model with the same parameter count:
CIFAR ResNets with parameter-free option-A shortcuts (He et al. 2016, 4.2), ImageNet ResNets
as bottleneck v1.5. Channels-last (NHWC), TensorFlow's native layout on CPU.

Keras 2, never Keras 3: Keras 3 fails under MultiWorkerMirroredStrategy (keras#20585). From
TensorFlow 2.16 on Keras 2 is the tf_keras package (the TensorFlow environment); up to 2.15
it is tf.keras itself (the Horovod + TensorFlow environment: Horovod 0.28.1 builds against no
later TensorFlow).
"""

from __future__ import annotations

import tensorflow as tf

try:
    import tf_keras as keras

    KERAS_VERSION = keras.__version__
except ImportError:
    from importlib.metadata import version

    from tensorflow import keras

    KERAS_VERSION = version("keras")  # tf.keras has no __version__ of its own
if not KERAS_VERSION.startswith("2."):
    raise ImportError(
        f"the Keras ResNets need Keras 2 (tf_keras beside TensorFlow >= 2.16); "
        f"this environment has Keras {KERAS_VERSION}"
    )
layers = keras.layers

CIFAR_DEPTHS = {"resnet20": 3, "resnet32": 5, "resnet44": 7, "resnet56": 9, "resnet110": 18}
IMAGENET_LAYERS = {"resnet50": (3, 4, 6, 3), "resnet101": (3, 4, 23, 3), "resnet152": (3, 8, 36, 3)}


# PyTorch's BatchNorm2d defaults: momentum 0.1 (Keras counts it the other way) and eps 1e-5.
def _bn() -> layers.Layer:
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)


def _conv(filters: int, kernel: int, stride: int = 1) -> layers.Layer:
    # He normal, fan_out, as torch_ddp.models._init; "same" padding with stride 2 pads
    # asymmetrically in TF, so pad explicitly like PyTorch's padding=k//2.
    return layers.Conv2D(
        filters,
        kernel,
        stride,
        padding="valid",
        use_bias=False,
        kernel_initializer=keras.initializers.VarianceScaling(
            2.0, mode="fan_out", distribution="untruncated_normal"
        ),
    )


def _padded_conv(x, filters: int, kernel: int, stride: int = 1):
    if kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2)(x)
    return _conv(filters, kernel, stride)(x)


def _pad_shortcut(x, extra: int):
    """Option A: halve the spatial size, zero-pad the new channels; no parameters."""
    half = extra // 2
    return layers.Lambda(
        lambda t: tf.pad(t[:, ::2, ::2, :], [[0, 0], [0, 0], [0, 0], [half, extra - half]])
    )(x)


def _basic_block(x, cin: int, cout: int, stride: int):
    out = layers.ReLU()(_bn()(_padded_conv(x, cout, 3, stride)))
    out = _bn()(_padded_conv(out, cout, 3))
    short = _pad_shortcut(x, cout - cin) if stride != 1 or cin != cout else x
    return layers.ReLU()(layers.Add()([out, short]))


def cifar_resnet(blocks_per_stage: int, classes: int) -> keras.Model:
    inputs = keras.Input((32, 32, 3))
    x = layers.ReLU()(_bn()(_padded_conv(inputs, 16, 3)))
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(blocks_per_stage):
            x = _basic_block(x, cin, cout, stride if i == 0 else 1)
            cin = cout
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(classes)(x))


def _bottleneck(x, cin: int, width: int, stride: int):
    cout = width * 4
    out = layers.ReLU()(_bn()(_padded_conv(x, width, 1)))
    out = layers.ReLU()(_bn()(_padded_conv(out, width, 3, stride)))
    out = _bn()(_padded_conv(out, cout, 1))
    short = x
    if stride != 1 or cin != cout:
        short = _bn()(_conv(cout, 1, stride)(x))
    return layers.ReLU()(layers.Add()([out, short]))


def imagenet_resnet(blocks: tuple[int, int, int, int], classes: int) -> keras.Model:
    inputs = keras.Input((224, 224, 3))
    x = layers.ReLU()(_bn()(_padded_conv(inputs, 64, 7, 2)))
    x = layers.MaxPooling2D(3, 2)(layers.ZeroPadding2D(1)(x))
    cin = 64
    for width, count, stride in zip((64, 128, 256, 512), blocks, (1, 2, 2, 2)):
        for i in range(count):
            x = _bottleneck(x, cin, width, stride if i == 0 else 1)
            cin = width * 4
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(classes)(x))


def build(name: str, classes: int) -> keras.Model:
    if name in CIFAR_DEPTHS:
        return cifar_resnet(CIFAR_DEPTHS[name], classes)
    if name in IMAGENET_LAYERS:
        return imagenet_resnet(IMAGENET_LAYERS[name], classes)
    raise ValueError(f"unknown model {name!r}")


def parameter_count(model: keras.Model) -> int:
    return int(sum(int(tf.size(v)) for v in model.trainable_variables))

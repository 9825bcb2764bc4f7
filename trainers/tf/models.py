"""The Keras models of the TensorFlow trainer, built alike to trainers/models.py's (the same layer shapes and
parameter count): the thesis's ResNet-50 as torchvision builds it (the stride in the bottleneck's 3x3 convolution,
no convolution biases; Keras's own ResNet50 differs in both) and the local scale's CIFAR-style ResNets. In tf-keras
(Keras 2): Horovod's gradient tape and MultiWorkerMirroredStrategy both handle its variables (Keras 3's need
workarounds, and Horovod's Keras 3 optimizer silently does not average).

BatchNorm as PyTorch's (momentum 0.1 there is 0.9 here, epsilon 1e-5); convolutions He-initialised on their fan-out
as trainers/models.py does. NHWC: TensorFlow's CPU convolutions take no other layout.
"""
from __future__ import annotations

import tf_keras as keras

from contract.config import CIFAR_RESNET_DEPTHS, TF_MODELS, ConfigError, ModelConfig

layers = keras.layers


def batch_norm() -> layers.Layer:
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)


def conv(filters: int, size: int, stride: int) -> layers.Layer:
    # an initializer a layer: one instance shared would give every layer of a shape the same values
    he_fan_out = keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")
    return layers.Conv2D(filters, size, stride, padding="same", use_bias=False, kernel_initializer=he_fan_out)


def basic_block(x, cout: int, stride: int):
    """trainers/models.py's BasicBlock: two 3x3 convolutions, a 1x1 projection where the shape changes."""
    shortcut = x
    if stride != 1 or x.shape[-1] != cout:
        shortcut = batch_norm()(conv(cout, 1, stride)(x))
    out = layers.ReLU()(batch_norm()(conv(cout, 3, stride)(x)))
    out = batch_norm()(conv(cout, 3, 1)(out))
    return layers.ReLU()(layers.Add()([out, shortcut]))


def cifar_resnet(depth: int, num_classes: int, width: int, image_size: int) -> keras.Model:
    """He et al.'s (2016) CIFAR ResNet: 3 stages of (depth-2)/6 basic blocks, widths w, 2w, 4w."""
    inputs = keras.Input((image_size, image_size, 3))
    x = layers.ReLU()(batch_norm()(conv(width, 3, 1)(inputs)))
    for stage, cout in enumerate((width, 2 * width, 4 * width)):
        for b in range((depth - 2) // 6):
            x = basic_block(x, cout, 2 if stage > 0 and b == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x), name=f"cifar_resnet{depth}")


def bottleneck(x, width: int, stride: int):
    """torchvision's Bottleneck: 1x1, 3x3 (the stride), 1x1 to 4 x width; a 1x1 projection where the shape changes."""
    shortcut = x
    if stride != 1 or x.shape[-1] != 4 * width:
        shortcut = batch_norm()(conv(4 * width, 1, stride)(x))
    out = layers.ReLU()(batch_norm()(conv(width, 1, 1)(x)))
    out = layers.ReLU()(batch_norm()(conv(width, 3, stride)(out)))
    out = batch_norm()(conv(4 * width, 1, 1)(out))
    return layers.ReLU()(layers.Add()([out, shortcut]))


def resnet50(num_classes: int, image_size: int) -> keras.Model:
    inputs = keras.Input((image_size, image_size, 3))
    x = layers.ReLU()(batch_norm()(conv(64, 7, 2)(inputs)))
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for b in range(blocks):
            x = bottleneck(x, width, 2 if stage > 0 and b == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x), name="resnet50")


def build_keras_model(cfg: ModelConfig, image_size: int) -> keras.Model:
    """The model that outputs logits (the loss applies the softmax, as PyTorch's cross-entropy does); its initial
    weights follow TensorFlow's global seed (bench.py sets train.seed)."""
    if cfg.name == "resnet50":
        return resnet50(cfg.num_classes, image_size)
    if cfg.name in CIFAR_RESNET_DEPTHS:
        return cifar_resnet(CIFAR_RESNET_DEPTHS[cfg.name], cfg.num_classes, cfg.width, image_size)
    raise ConfigError(f"model.name = {cfg.name!r}: the TensorFlow trainer builds {', '.join(TF_MODELS)}")

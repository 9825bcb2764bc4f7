"""Models: torchvision's ImageNet ResNets (the thesis's ResNet-50) and a CIFAR-style ResNet for the local scale."""
from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F
import torchvision.models as tv

from contract.config import CIFAR_RESNET_DEPTHS, IMAGENET_RESNETS, MODELS, ConfigError, ModelConfig


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """He et al.'s (2016) CIFAR ResNet: 3 stages of (depth-2)/6 basic blocks, widths w, 2w, 4w."""

    def __init__(self, depth: int, num_classes: int, width: int = 16):
        super().__init__()
        blocks = (depth - 2) // 6
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, stride=2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def build_model(cfg: ModelConfig) -> nn.Module:
    if cfg.name in IMAGENET_RESNETS:
        return getattr(tv, cfg.name)(num_classes=cfg.num_classes)  # random init, no downloaded weights
    if cfg.name in CIFAR_RESNET_DEPTHS:
        return CifarResNet(CIFAR_RESNET_DEPTHS[cfg.name], cfg.num_classes, cfg.width)
    raise ConfigError(f"model.name = {cfg.name!r} is not a known model; choose one of {', '.join(MODELS)}")

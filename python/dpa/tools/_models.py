# SPDX-License-Identifier: Apache-2.0
"""The models of python -m dpa.train, with synthetic batches of the right shapes.

ResNet-18 and ResNet-50 come from torchvision when it is importable and otherwise from the
definitions below, which build the same modules under the same names (ResNet v1.5: the stride of
a bottleneck sits on its 3x3 convolution; torchvision's initialisation), so the parameter counts
and the gradient sizes DDP all-reduces are torchvision's: 11,689,512 and 25,557,032 with 1000
classes. "gpt" is a small GPT-style decoder (pre-norm blocks of causal self-attention and a GELU
MLP, learned positions, the output layer tied to the token embedding)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# Batches each rank generates before training and cycles through: the benchmark measures
# training steps, not a data pipeline.
DATA_BATCHES = 4


def _conv3x3(inputs, outputs, stride=1):
    return nn.Conv2d(inputs, outputs, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(inputs, outputs, stride=1):
    return nn.Conv2d(inputs, outputs, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inputs, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = _conv3x3(inputs, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inputs, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = _conv1x1(inputs, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(_conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(width, dim=2))
        if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class DecoderBlock(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, vocabulary, sequence, width, layers, heads):
        super().__init__()
        self.tokens = nn.Embedding(vocabulary, width)
        self.positions = nn.Embedding(sequence, width)
        self.blocks = nn.Sequential(*[DecoderBlock(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary, bias=False)
        self.head.weight = self.tokens.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.blocks(self.tokens(tokens) + self.positions(positions))
        return self.head(self.ln(x))


def resnet(name, num_classes, prefer_torchvision=True):
    """(model, where its definition came from): torchvision's when importable, else ours."""
    if prefer_torchvision:
        try:
            import torchvision
        except ImportError:
            pass
        else:
            return getattr(torchvision.models, name)(num_classes=num_classes), f"torchvision {torchvision.__version__}"
    block, layers = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet50": (Bottleneck, [3, 4, 6, 3])}[name]
    return ResNet(block, layers, num_classes), __name__


class ModelSpec:
    """One benchmark model: how to build it, what a sample is, and its synthetic batches."""

    def __init__(self, name, settings):
        self.name = name
        self.settings = settings
        self.is_resnet = name.startswith("resnet")

    def default_batch(self):
        return 32 if self.is_resnet else 8

    def build(self):
        """(model, source) with the initial parameters of --seed, the same on every rank."""
        settings = self.settings
        torch.manual_seed(settings["seed"])
        if self.is_resnet:
            return resnet(self.name, settings["classes"])
        return Gpt(settings["vocabulary"], settings["sequence"], settings["gpt_width"], settings["gpt_layers"],
                   settings["gpt_heads"]), __name__

    def batches(self, rank, batch, device):
        """DATA_BATCHES (inputs, targets) pairs, different on every rank."""
        settings = self.settings
        generator = torch.Generator().manual_seed(settings["seed"] * 1_000_003 + rank)
        pairs = []
        for _ in range(DATA_BATCHES):
            if self.is_resnet:
                size = settings["image_size"]
                inputs = torch.randn(batch, 3, size, size, generator=generator)
                targets = torch.randint(settings["classes"], (batch,), generator=generator)
            else:
                # Next-token prediction: the targets are the inputs shifted by one.
                sequence = torch.randint(settings["vocabulary"], (batch, settings["sequence"] + 1),
                                         generator=generator)
                inputs, targets = sequence[:, :-1], sequence[:, 1:]
            pairs.append((inputs.contiguous().to(device), targets.contiguous().to(device)))
        return pairs

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))

    def describe(self):
        settings = self.settings
        if self.is_resnet:
            return f"{settings['image_size']}x{settings['image_size']} images, {settings['classes']} classes"
        return (f"{settings['gpt_layers']} layers, width {settings['gpt_width']}, {settings['gpt_heads']} heads, "
                f"{settings['sequence']} tokens, vocabulary {settings['vocabulary']}")


MODELS = ("resnet18", "resnet50", "gpt")

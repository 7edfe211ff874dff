"""Plain networks: images in, class logits out. No Lightning here, so they export cleanly."""

from torch import nn


class SmallCNN(nn.Module):
    """Two convolutions with BatchNorm, one pooling step and a dropout-regularized head."""

    def __init__(
        self,
        in_channels: int = 1,
        image_size: int = 8,
        num_classes: int = 10,
        width: int = 32,
        dropout: float = 0.25,
    ):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(2 * width * (image_size // 2) ** 2, num_classes),
        )

    def forward(self, x):
        return self.head(self.features(x))


class MLP(nn.Module):
    """Flattens the image and applies fully connected layers with BatchNorm and dropout."""

    def __init__(
        self,
        in_features: int = 64,
        num_classes: int = 10,
        width: int = 128,
        depth: int = 2,
        dropout: float = 0.2,
    ):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        for index in range(depth):
            layers += [
                nn.Linear(in_features if index == 0 else width, width, bias=False),
                nn.BatchNorm1d(width),
                nn.ReLU(),
                nn.Dropout(dropout),
            ]
        layers.append(nn.Linear(width, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)

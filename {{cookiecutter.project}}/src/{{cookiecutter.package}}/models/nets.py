"""Plain networks: images, table rows or token ids in, class logits (or one value) out. No
Lightning here, so they export cleanly."""

from torch import nn

from ..console import UserError


def check_settings(**settings) -> None:
    """One line for a size below 1 or a dropout outside 0..1, before any layer is built: a width
    of 0 would build, then fail in the first step with a long traceback."""
    for name, value in settings.items():
        if name == "dropout":
            if type(value) not in (int, float) or not 0 <= value < 1:
                raise UserError(f"model.net.dropout={value} must be a fraction from 0 to below 1")
        elif type(value) is not int or value < 1:
            raise UserError(f"model.net.{name}={value} must be a whole number of at least 1")


class SmallCNN(nn.Module):
    """Two convolutions with BatchNorm, one pooling step and a dropout-regularized head.

    Images larger than `work_size` are brought down to it by a strided first convolution, so
    64x64 costs about what 16x16 does; the head pools to a 4x4 grid whatever the image size.
    """

    # The samples a network takes, dtype and number of dimensions (None: any), which builders.py
    # checks the data's against before building it: images here, channels x height x width.
    takes = ("float32", 3)

    def __init__(
        self,
        in_channels: int = 1,
        image_size: int = 8,
        num_classes: int = 10,
        width: int = 32,
        dropout: float = 0.25,
        work_size: int = 16,
    ):
        super().__init__()
        check_settings(width=width, dropout=dropout, work_size=work_size)
        stride = max(1, image_size // work_size)
        pooled = ((image_size - stride) // stride + 1) // 2  # the map's size after MaxPool2d
        self.features = nn.Sequential(
            # A 3x3 kernel at stride 1; at stride s, kernels overlap by one pixel on each side.
            nn.Conv2d(in_channels, width, stride + 2, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            # Already 4x4 for the 8x8 digits: pooling again would change nothing, yet cost a
            # layer that an INT8 export runs slower than the convolutions around it.
            nn.Identity() if pooled == 4 else nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(2 * width * 4 * 4, num_classes),
        )

    def forward(self, x):
        return self.head(self.features(x))


class MLP(nn.Module):
    """Flattens its input (an image or a table row), then fully connected layers with BatchNorm
    and dropout."""

    takes = ("float32", None)  # numbers of any shape

    def __init__(
        self,
        in_features: int = 64,
        num_classes: int = 10,
        width: int = 128,
        depth: int = 2,
        dropout: float = 0.2,
    ):
        super().__init__()
        check_settings(width=width, depth=depth, dropout=dropout)
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


class TokenBag(nn.Module):
    """A bag of tokens: the mean of the embeddings of a text's tokens, then dropout and a linear
    layer (fastText's classifier without its n-grams, which overfit the example's few thousand
    texts). Padding (id 0) counts for nothing, so a text gives the same answer however it is
    padded."""

    takes = ("int64", 1)  # a text's token ids

    def __init__(
        self, vocab_size: int = 20000, num_classes: int = 2, dim: int = 64, dropout: float = 0.5
    ):
        super().__init__()
        check_settings(vocab_size=vocab_size, dim=dim, dropout=dropout)
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=0)
        # Small starting embeddings (PyTorch's are N(0, 1)): at the optimizer's learning rate
        # they move far from where they began, and the mean of a text's tokens is not drowned in
        # their random starting values. 6 points of test accuracy on the example quotations.
        nn.init.normal_(self.tokens.weight, std=0.1)
        nn.init.zeros_(self.tokens.weight[0])  # padding
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(dim, num_classes))

    def forward(self, ids):
        present = (ids != 0).sum(1, keepdim=True).clamp(min=1)
        return self.head(self.tokens(ids).sum(1) / present)

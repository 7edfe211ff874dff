"""A small transformer for images (a vision transformer over patches), table rows (an
FT-Transformer over feature tokens) and texts (an encoder over token ids, as BERT), written so
that onnxruntime's transformer optimizer fuses its exported graph into Attention and Gelu
kernels."""

import math

import torch
from torch import nn

from ..console import UserError
from .nets import check_settings


class SelfAttention(nn.Module):
    """Multi-head self-attention written out: separate query, key and value layers, heads split
    by reshape and transpose, and for texts an additive mask on the scores. This is the subgraph
    onnxruntime's fusion matches; `F.scaled_dot_product_attention` and `nn.MultiheadAttention`
    export and run as well, but their attention does not fuse."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.query, self.key, self.value, self.out = (nn.Linear(dim, dim) for _ in range(4))
        self.dropout = nn.Dropout(dropout)

    def split(self, x: torch.Tensor) -> torch.Tensor:  # -> (batch, heads, tokens, head_dim)
        return x.reshape(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        # Divided, not multiplied by 1 / sqrt: the fusion matches Softmax <- Div, or with a mask
        # Softmax <- Add <- Div, the scores first.
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        context = torch.matmul(self.dropout(scores.softmax(dim=-1)), v)
        return self.out(context.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


class Block(nn.Module):
    """A pre-norm encoder block: attention, then a GELU MLP, each with a residual connection."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, dropout: float):
        super().__init__()
        hidden = round(dim * mlp_ratio)
        self.norm1, self.attention = nn.LayerNorm(dim), SelfAttention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        # Exact GELU: its exported Erf chain fuses into one Gelu kernel.
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, dim)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        # Branch first, residual second, as in Hugging Face's BERT and ViT: the attention fusion
        # looks for the branch in the first input of the Add; `x + branch` leaves the first
        # block's attention unfused.
        x = self.dropout(self.attention(self.norm1(x), mask)) + x
        return self.dropout(self.mlp(self.norm2(x))) + x


class PatchTokens(nn.Module):
    """An image as a grid of non-overlapping patches, each flattened into a token, with a learned
    position. A Linear layer rather than the equivalent strided convolution: without a Conv in
    the graph, export quantizes the network dynamically, which is faster than static QDQ here."""

    def __init__(self, channels: int, image_size: int, patch_size: int, dim: int):
        super().__init__()
        self.patch_size = patch_size
        self.embed = nn.Linear(channels * patch_size**2, dim)
        self.position = nn.Parameter(torch.randn(1, (image_size // patch_size) ** 2, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        p = self.patch_size
        patches = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return self.embed(patches.reshape(b, (h // p) * (w // p), c * p * p)) + self.position


class FeatureTokens(nn.Module):
    """A table row as one token per feature, x_i * W_i + b_i: every feature has an embedding of
    its own, which also tells the tokens apart."""

    def __init__(self, features: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, dim) / math.sqrt(dim))
        self.bias = nn.Parameter(torch.randn(features, dim) / math.sqrt(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(-1) * self.weight + self.bias


class TextTokens(nn.Module):
    """A text's token ids as embeddings, each with a learned position: any number of tokens up
    to `max_length`, so that exports take texts padded to any length."""

    def __init__(self, vocab_size: int, max_length: int, dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.position = nn.Embedding(max_length, dim)
        nn.init.normal_(self.position.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # Positions looked up rather than a slice of a table: shape inference then knows that
        # both terms have as many tokens, which onnxruntime's quantizer needs.
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.embed(ids) + self.position(positions)


def padding_mask(ids: torch.Tensor) -> torch.Tensor:
    """What attention adds to its scores for the CLS token and `ids`: 0 for a token, -10000 for
    padding (id 0), whose weight after the softmax is then exactly 0, so a text gets the same
    answer however far it is padded. Written as BERT's, (1 - mask) * -10000 on the mask
    unsqueezed twice: the pattern onnxruntime's attention fusion takes for a padding mask."""
    keep = torch.cat([torch.ones_like(ids[:, :1], dtype=torch.bool), ids != 0], dim=1)
    return (1.0 - keep.unsqueeze(1).unsqueeze(2).float()) * -10000.0


class Transformer(nn.Module):
    """Tokens, a CLS token, `depth` encoder blocks and a linear head on the CLS token's output.

    With `image_size` (image data) the tokens are a `grid` x `grid` of patches; with
    `vocab_size` (texts) a text's token ids, up to `max_length`, whose padding attention skips;
    without either (table rows) there is one token per feature.
    """

    def __init__(
        self,
        in_channels: int | None = None,
        image_size: int | None = None,
        in_features: int = 64,
        vocab_size: int | None = None,
        max_length: int | None = None,
        num_classes: int = 10,
        grid: int = 2,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        dropout: float = 0.1,
    ):
        super().__init__()
        check_settings(grid=grid, dim=dim, depth=depth, heads=heads, dropout=dropout)
        if dim % heads:
            raise UserError(f"model.net.dim={dim} must be a multiple of model.net.heads={heads}")
        if image_size:
            if image_size % grid:
                raise UserError(
                    f"model.net.grid={grid} does not divide data.image_size={image_size} into "
                    "patches; pass a divisor of it"
                )
            self.tokens = PatchTokens(in_channels, image_size, image_size // grid, dim)
        elif vocab_size:
            check_settings(vocab_size=vocab_size, max_length=max_length)
            self.tokens = TextTokens(vocab_size, max_length, dim)
        else:
            self.tokens = FeatureTokens(in_features, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        # What onnxruntime's transformer optimizer is told about the graph it fuses.
        self.heads, self.dim = heads, dim
        self.masked = isinstance(self.tokens, TextTokens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), self.tokens(x)], dim=1)
        mask = padding_mask(x) if self.masked else None
        for block in self.blocks:
            tokens = block(tokens, mask)
        return self.head(self.norm(tokens)[:, 0])

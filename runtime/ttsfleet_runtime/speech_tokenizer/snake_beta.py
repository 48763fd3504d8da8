"""SnakeBeta, the periodic activation of both rates' vocoders (the 12 Hz decoder's
convolution blocks, the 25 Hz BigVGAN): one definition, which neither rate owns
(speech_tokenizer's independence contract)."""

from __future__ import annotations

import torch
from torch import nn


class SnakeBeta(nn.Module):
    """x + 1/exp(beta) * sin^2(x * exp(alpha)), per channel (log-scale parameters), on
    channels-last input.

    The per-channel factors are derived from the parameters once, whenever they are
    loaded, not on every call.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.register_buffer("frequency", torch.empty(channels), persistent=False)
        self.register_buffer("inverse_magnitude", torch.empty(channels), persistent=False)
        self.derive_factors()
        self.register_load_state_dict_post_hook(lambda module, _: module.derive_factors())

    @torch.no_grad()
    def derive_factors(self) -> None:
        self.frequency = torch.exp(self.alpha.detach())
        self.inverse_magnitude = 1.0 / (torch.exp(self.beta.detach()) + 1e-9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(x, self.inverse_magnitude, torch.sin(x * self.frequency).square())

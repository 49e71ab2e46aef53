"""Megatron-Core's megatron/core/enums.py ModelType (the values of Megatron-LM at HEAD)."""
from megatron._stub import PickledEnum as _Enum


class ModelType(_Enum):
    encoder_or_decoder = 1
    retro_encoder = 2
    retro_decoder = 3

"""Megatron-Core's megatron/core/enums.py ModelType (the values of Megatron-LM at HEAD)."""
import enum


class _Enum(enum.Enum):
    def __reduce_ex__(self, proto):  # Class(value), as Megatron's allow-list expects (not getattr)
        return type(self), (self.value,)


class ModelType(_Enum):
    encoder_or_decoder = 1
    retro_encoder = 2
    retro_decoder = 3

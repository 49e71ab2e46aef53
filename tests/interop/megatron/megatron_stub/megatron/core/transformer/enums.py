"""megatron/core/transformer/enums.py: the enums that args pickles."""
from megatron._stub import PickledEnum as _Enum


class AttnBackend(_Enum):
    flash = 1
    fused = 2
    unfused = 3
    local = 4
    auto = 5


class CudaGraphScope(_Enum):
    full = 1
    attn = 2
    mlp = 3


class CudaGraphModule(_Enum):
    full = 1
    attn = 2


class InferenceCudaGraphScope(_Enum):
    none = 1
    block = 2
    full = 3

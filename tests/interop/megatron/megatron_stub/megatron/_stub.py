"""The stub's own base (no Megatron module): its enums pickle as Class(value), as Megatron's
allow-list expects (not getattr)."""
import enum


class PickledEnum(enum.Enum):
    def __reduce_ex__(self, proto):
        return type(self), (self.value,)

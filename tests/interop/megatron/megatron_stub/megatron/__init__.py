"""A stand-in for the few Megatron-LM classes a checkpoint's pickle names (the tests' fixture
writer, tests/interop/megatron/megatron_fixture.py).  Only the names and the enum values matter: they
are pickled as GLOBAL module.Class + (value,) + REDUCE, as Megatron's own enums are."""

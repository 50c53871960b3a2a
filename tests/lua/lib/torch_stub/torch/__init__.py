"""A stand-in for torch, for tests on a machine without it.

FlashInfer-Bench's modules import torch at module level (dtype tables,
safetensors.torch), though loading a dataset and building a CUDA solution with
its TVM-FFI builder never call into it.  With this folder on PYTHONPATH
`scripts/fib_roundtrip.py --build-only` runs FlashInfer-Bench's own loader and
builder there (tests/lua/test_fib_export.lua); anything that really needs
torch gets a placeholder object and fails visibly.
"""

__version__ = "0.0+khlua-stub"


class _Placeholder:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, key):
        return _Placeholder(self._name + "." + key)

    def __call__(self, *args, **kwargs):
        return _Placeholder(self._name + "()")

    def __repr__(self):
        return self._name

    def __hash__(self):
        return hash(self._name)

    def __eq__(self, other):
        return isinstance(other, _Placeholder) and other._name == self._name


class dtype:
    pass


class Tensor:
    pass


class device:
    def __init__(self, *args, **kwargs):
        pass


class version:
    cuda = None
    hip = None


class cuda:
    @staticmethod
    def is_available():
        return False


def __getattr__(name):
    return _Placeholder("torch." + name)

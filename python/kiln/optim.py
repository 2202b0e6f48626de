"""Optimizers, as torch.optim: AdamW and SGD (Kiln's C++ ones), and the
warmup + cosine learning rate the recipes use."""
from . import _C
from ._C import warmup_cosine_lr  # noqa: F401

__all__ = ["AdamW", "SGD", "Optimizer", "warmup_cosine_lr"]


class _ParamGroup(dict):
    """param_groups[0]: setting "lr" sets the optimizer's rate, as in PyTorch."""

    def __init__(self, impl, params):
        super().__init__(params=params)
        self._impl = impl

    def __getitem__(self, key):
        return self._impl.lr if key == "lr" else super().__getitem__(key)

    def __setitem__(self, key, value):
        if key == "lr":
            self._impl.lr = float(value)
        else:
            super().__setitem__(key, value)


class Optimizer:
    def __init__(self, impl, params):
        self._impl = impl
        self.param_groups = [_ParamGroup(impl, params)]

    def step(self):
        self._impl.step()

    def zero_grad(self, set_to_none=True):
        self._impl.zero_grad()

    @property
    def lr(self):
        return self._impl.lr

    @lr.setter
    def lr(self, value):
        self._impl.lr = float(value)


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        params = list(params)
        super().__init__(_C._AdamW(params, lr, betas[0], betas[1], eps, weight_decay), params)


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, weight_decay=0.0, nesterov=False):
        params = list(params)
        super().__init__(_C._SGD(params, lr, momentum, weight_decay, nesterov), params)

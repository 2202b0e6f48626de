"""Kiln from Python: tensors with autograd, layers, optimizers, and the
command's recipes, planner and models, with PyTorch's names where they mean
the same thing.

    import kiln
    x = kiln.tensor([[1.0, 2.0]], requires_grad=True)
    (x * x).sum().backward()
    kiln.train("fashion-mlp", steps=200, out="runs/mlp")
"""
import builtins as _builtins
import json as _json

import numpy as _np

from . import _C
from ._C import (KilnError, Model, Tensor, __version__, add, arange, argmax, cat, device, div, dtype, exp,
                 from_dlpack, from_numpy, full, get_num_threads, is_grad_enabled, load, load_file, log, log_softmax,
                 manual_seed, matmul, maximum, mean, mul, no_grad, ones, randn, relu, save_file, set_num_threads,
                 sigmoid, softmax, sqrt, sub, sum, tanh, zeros)

float32 = dtype.float32
float64 = dtype.float64
float16 = dtype.float16
bfloat16 = dtype.bfloat16
int32 = dtype.int32
int64 = dtype.int64
uint8 = dtype.uint8
float, double, half, long = float32, float64, float16, int64  # PyTorch's short names


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data` (a numpy array, a list, a number or a
    tensor), as torch.tensor: Python floats become float32 and ints int64."""
    if isinstance(data, Tensor):
        t = data.detach().clone()
    else:
        array = _np.asarray(data)
        if not isinstance(data, _np.ndarray) and array.dtype == _np.float64:
            array = array.astype(_np.float32)
        t = _C._copy_numpy(array)
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if device is not None:
        t = t.to(_C.device(str(device)))
    if requires_grad:
        t.requires_grad = True
    return t


def as_tensor(data, dtype=None):
    """`data` as a tensor, sharing a numpy array's memory where its dtype and
    strides allow (as torch.as_tensor), else a copy."""
    if isinstance(data, Tensor):
        return data if dtype is None else data.to(dtype)
    if isinstance(data, _np.ndarray):
        try:
            t = from_numpy(data)
        except (TypeError, ValueError):
            return tensor(data, dtype)
        return t if dtype is None or t.dtype == dtype else t.to(dtype)
    return tensor(data, dtype)


def _command_args(command, recipe, options):
    """kiln.train(recipe, steps=5, no_progress=True) -> the command line
    `train recipe --steps 5 --no-progress`: the command's own parser reads it."""
    args = [command] + ([recipe] if recipe is not None else [])
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, repr(value) if isinstance(value, _builtins.float) else str(value)]
    return args


def train(recipe=None, **options):
    """Runs a training recipe as `kiln train` does, with its options as keyword
    arguments (steps=200, out="runs/x", lr=1e-3, precision="bf16",
    no_progress=True, ...). Returns the summary as a dict. Ctrl-C stops the
    run at a step boundary with a checkpoint (resume=True continues it) and
    raises KeyboardInterrupt."""
    return _C._train(_command_args("train", recipe, options))


def plan(recipe=None, **options):
    """What `kiln plan --json` prints, as a dict: memory, the strategies that
    fit, time and cost (model="hf:DIR", gpu="H100", lora_rank=16, ...)."""
    return _json.loads(_C._plan(_command_args("plan", recipe, options)))


def _getitem(self, key):
    """t[i], t[a:b:c], t[..., None]: views through the autograd slice op."""
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
        at = [i for i, k in enumerate(key) if k is Ellipsis]
        if len(at) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        named = _builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
        key = key[:at[0]] + (slice(None),) * (self.ndim - named) + key[at[0] + 1:]
    t, dim = self, 0
    for k in key:
        if k is None:
            t = t.unsqueeze(dim)
            dim += 1
        elif isinstance(k, slice):
            if dim >= t.ndim:
                raise IndexError(f"too many indices for a tensor of {self.ndim} dimensions")
            start, stop, step = k.indices(t.shape[dim])
            if step <= 0:
                raise ValueError("slices of Kiln tensors take a positive step")
            t = t._slice(dim, start, max(start, stop), step)
            dim += 1
        elif isinstance(k, int) and not isinstance(k, bool):
            if dim >= t.ndim:
                raise IndexError(f"too many indices for a tensor of {self.ndim} dimensions")
            size = t.shape[dim]
            if not -size <= k < size:
                raise IndexError(f"index {k} is out of bounds for dimension {dim} of size {size}")
            k %= size
            t = t._slice(dim, k, k + 1, 1).squeeze(dim)
        else:
            raise TypeError(f"Kiln tensors take ints, slices, None and ... as indices, not {type(k).__name__}")
    return t


def _repr(self):
    """Values as torch prints them, where numpy can show them."""
    suffix = "" if self.dtype in (float32, int64) else f", dtype={self.dtype}"
    suffix += "" if self.device.type == "cpu" else f", device='{self.device}'"
    suffix += ", requires_grad=True" if self.requires_grad else ""
    if self.device.type != "cpu" or self.dtype == bfloat16:
        return f"tensor(shape={list(self.shape)}{suffix})"
    body = _np.array2string(_np.asarray(self), separator=", ", prefix="tensor(")
    return f"tensor({body}{suffix})"


Tensor.__getitem__ = _getitem
Tensor.__repr__ = _repr

from . import data, nn, optim  # noqa: E402  (they use the names above)


def apply_chat_template(messages, chat_template=None, model=None, tools=None, add_generation_prompt=True,
                        bos_token=None, eos_token=None, **template_kwargs):
    """The text a chat template makes of a conversation, as transformers'
    tokenizer.apply_chat_template(messages, tokenize=False, ...) renders it:
    `chat_template` is Jinja source, or `model` names a Hugging Face folder
    ("hf:DIR" or DIR) whose template and special tokens are used. Extra
    keyword arguments are template variables (enable_thinking=False, ...).
    What the template raises is a kiln.KilnError with its message."""
    if (chat_template is None) == (model is None):
        raise ValueError("give chat_template (Jinja source) or model (a Hugging Face folder), not both or neither")
    folder = "" if model is None else (model[3:] if str(model).startswith("hf:") else str(model))
    return _C._apply_chat_template(_json.dumps(list(messages)), chat_template or "", folder, _json.dumps(tools),
                                   add_generation_prompt, bos_token, eos_token, _json.dumps(template_kwargs))

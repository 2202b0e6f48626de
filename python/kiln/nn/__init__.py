"""Layers and modules, as torch.nn: subclass Module, assign layers and
parameters as attributes, and write forward(). The layers with weights are
Kiln's C++ layers (initialised as PyTorch initialises them, from the
generator kiln.manual_seed resets)."""
from .. import _C
from .. import Tensor
from . import functional, utils  # noqa: F401


def Parameter(data, requires_grad=True):
    """A leaf tensor that a Module registers and an optimizer trains."""
    t = data.detach()
    t.requires_grad = requires_grad
    return t


class Module:
    """The base of every layer and model: attributes that are Modules or
    parameters (leaf tensors that require gradients) are registered, so
    parameters(), train()/eval(), zero_grad() and state_dict() reach them."""

    def __init__(self):
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_modules" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() before assigning "
                                 f"'{name}'")
        self._modules.pop(name, None)
        self._parameters.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            self._parameters[name] = value
        object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_parameters(self, prefix=""):
        for name, p in self._parameters.items():
            yield prefix + name, p
        for name, m in self._modules.items():
            yield from m.named_parameters(prefix + name + ".")

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_children(self):
        return iter(self._modules.items())

    def children(self):
        return iter(self._modules.values())

    def train(self, mode=True):
        object.__setattr__(self, "training", mode)
        for m in self._modules.values():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    def to(self, target):
        """Moves (a device or "cuda") or converts (a dtype) every parameter in place."""
        target = target if isinstance(target, _C.dtype) else _C.device(str(target))
        for name, p in self._parameters.items():
            moved = p.detach().to(target)
            moved.requires_grad = True
            object.__setattr__(self, name, moved)
            self._parameters[name] = moved
        for m in self._modules.values():
            m.to(target)
        return self

    def state_dict(self):
        return {name: p.detach() for name, p in self.named_parameters()}

    def load_state_dict(self, state):
        """Copies `state` (name -> tensor or numpy array) into the parameters; every
        name must match, with the same shape."""
        mine = dict(self.named_parameters())
        missing, unexpected = sorted(set(mine) - set(state)), sorted(set(state) - set(mine))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        for name, value in state.items():
            mine[name].copy_(value if isinstance(value, Tensor) else _C._copy_numpy(value))

    def __repr__(self):
        inner = "".join(f"\n  ({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items())
        return f"{type(self).__name__}({self.extra_repr()}{inner}{chr(10) if inner else ''})"

    def extra_repr(self):
        return ""


class _CppLayer(Module):
    """A Module whose work and parameters are a C++ layer's (`impl`)."""

    def __init__(self, impl):
        super().__init__()
        object.__setattr__(self, "_impl", impl)

    def forward(self, x):
        return self._impl.forward(x)

    def named_parameters(self, prefix=""):
        for name, p in self._impl.named_parameters():
            yield prefix + name, p

    def train(self, mode=True):
        self._impl.train(mode)
        return super().train(mode)

    def to(self, target):
        self._impl.to(target if isinstance(target, _C.dtype) else _C.device(str(target)))
        return self


class Linear(_CppLayer):
    """y = x W^T + b, W [out_features, in_features], as torch.nn.Linear."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__(_C._Linear(in_features, out_features, bias))
        self.in_features, self.out_features = in_features, out_features

    weight = property(lambda self: self._impl.weight)
    bias = property(lambda self: self._impl.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(_CppLayer):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__(_C._Embedding(num_embeddings, embedding_dim))
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim

    weight = property(lambda self: self._impl.weight)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(_CppLayer):
    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__(_C._LayerNorm(normalized_shape, eps))
        self.normalized_shape, self.eps = normalized_shape, eps

    weight = property(lambda self: self._impl.weight)
    bias = property(lambda self: self._impl.bias)

    def extra_repr(self):
        return f"({self.normalized_shape},), eps={self.eps}"


class Conv2d(_CppLayer):
    """Square kernels, one stride and padding for both dimensions."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True):
        super().__init__(_C._Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias))
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        self.stride, self.padding = stride, padding

    weight = property(lambda self: self._impl.weight)
    bias = property(lambda self: self._impl.bias)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class GPT(_CppLayer):
    """Kiln's GPT-2 (the fortunes-gpt recipe's model): forward(ids [B, T]) gives
    logits [B, T, vocab]; loss(ids, targets) the mean next-token cross-entropy."""

    def __init__(self, config=None, **fields):
        config = config or _C.GPTConfig(**fields)
        super().__init__(_C._GPT(config))
        self.config = config

    def loss(self, ids, targets):
        return self._impl.loss(ids, targets)

    def generate(self, prompt, max_new_tokens, temperature=1.0, top_k=0, top_p=1.0, seed=0):
        """Token ids of `prompt` followed by max_new_tokens sampled ones (temperature 0: greedy)."""
        with _C.no_grad():
            return self._impl.generate(list(prompt), max_new_tokens, temperature, top_k, top_p, seed)


GPTConfig = _C.GPTConfig


class ReLU(Module):
    def forward(self, x):
        return _C.relu(x)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return _C.gelu(x, self.approximate)


class Tanh(Module):
    def forward(self, x):
        return _C.tanh(x)


class Flatten(Module):
    def __init__(self, start_dim=1):
        super().__init__()
        self.start_dim = start_dim

    def forward(self, x):
        return x.flatten(self.start_dim)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return _C.dropout(x, self.p, self.training)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride or kernel_size

    def forward(self, x):
        return _C.max_pool2d(x, self.kernel_size, self.stride)


class CrossEntropyLoss(Module):
    def __init__(self, ignore_index=-100):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return _C.cross_entropy(input, target, self.ignore_index)


class Sequential(Module):
    """Modules applied in order; named "0", "1", ... as torch.nn.Sequential names them."""

    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

"""torch.nn.utils's clip_grad_norm_."""
from .. import _C


def clip_grad_norm_(parameters, max_norm):
    """Scales the parameters' gradients so their global norm is at most max_norm;
    returns the norm before."""
    return _C.clip_grad_norm_(list(parameters), max_norm)

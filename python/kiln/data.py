"""Debian's Fashion-MNIST and the loader the image recipes train from:
a Python loop over ImageLoader sees the batches `kiln train fashion-mlp` sees
for the same seed."""
from . import _C
from ._C import FASHION_MNIST_VALIDATION_SIZE, ImageDataset, fashion_mnist_classes, split_indices  # noqa: F401


def FashionMNIST(part="train", dir=""):
    """images (uint8 [N, 28, 28]) and labels (int64 [N]) of the train or test part."""
    return _C.load_fashion_mnist(part, dir)


class ImageLoader:
    """Batches of (images float32 [B, 1, 28, 28] normalised, labels int64 [B]).
    Iterating gives one epoch; next() goes on across epochs, as the recipes do."""

    def __init__(self, dataset, indices=None, batch_size=64, shuffle=True, drop_last=False, seed=0):
        self._impl = _C.ImageLoader(dataset, list(indices) if indices is not None else [], batch_size, shuffle,
                                    drop_last, seed)

    def next(self):
        return self._impl.next()

    def __len__(self):
        return self._impl.batches_per_epoch()

    def __iter__(self):
        for _ in range(len(self)):
            yield self._impl.next()

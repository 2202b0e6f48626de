# Gradients of a small network written in Python, against PyTorch's for the
# same weights and inputs.
import numpy as np
import pytest

import kiln
import kiln.nn.functional as F


def test_small_network_gradients_match_pytorch(torch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 5)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    w1 = rng.standard_normal((16, 5)).astype(np.float32) * 0.5
    b1 = rng.standard_normal(16).astype(np.float32) * 0.1
    g, beta = (1 + 0.1 * rng.standard_normal(16)).astype(np.float32), (0.1 * rng.standard_normal(16)).astype(np.float32)
    w2 = rng.standard_normal((3, 16)).astype(np.float32) * 0.5

    def params(make):
        return [make(a) for a in (w1, b1, g, beta, w2)]

    kp = params(lambda a: kiln.tensor(a, requires_grad=True))
    h = F.layer_norm(kiln.tanh(F.linear(kiln.tensor(x), kp[0], kp[1])), kp[2], kp[3])
    h = h * kiln.sigmoid(h) + F.gelu(h) / 2  # a few elementwise ops, broadcasting a scalar
    loss = F.cross_entropy(F.linear(h, kp[4]), kiln.tensor(y)) + (kp[4] ** 2).mean() * 0.01
    loss.backward()

    tp = params(lambda a: torch.tensor(a, requires_grad=True))
    th = torch.nn.functional.layer_norm(torch.tanh(torch.nn.functional.linear(torch.tensor(x), tp[0], tp[1])), (16,),
                                        tp[2], tp[3])
    th = th * torch.sigmoid(th) + torch.nn.functional.gelu(th) / 2
    tloss = torch.nn.functional.cross_entropy(torch.nn.functional.linear(th, tp[4]), torch.tensor(y)) + \
        (tp[4] ** 2).mean() * 0.01
    tloss.backward()

    assert abs(loss.item() - tloss.item()) < 1e-5
    for k, t in zip(kp, tp):
        assert np.allclose(np.asarray(k.grad), t.grad.numpy(), atol=1e-5, rtol=1e-4)


def test_a_module_written_in_python_trains(torch):
    class Net(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = kiln.nn.Conv2d(1, 4, 3, padding=1)
            self.fc = kiln.nn.Linear(4 * 4 * 4, 10)
            self.scale = kiln.nn.Parameter(kiln.ones([1]))

        def forward(self, x):
            h = F.max_pool2d(kiln.relu(self.conv(x)), 2)
            return self.fc(h.flatten(1)) * self.scale

    kiln.manual_seed(1)
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "conv.weight", "conv.bias", "fc.weight", "fc.bias"]

    # The same weights in PyTorch: the same gradients.
    ref = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(64, 10))
    with torch.no_grad():
        for dst, src in [(ref[0].weight, net.conv.weight), (ref[0].bias, net.conv.bias), (ref[4].weight, net.fc.weight),
                         (ref[4].bias, net.fc.bias)]:
            dst.copy_(torch.from_numpy(np.asarray(src).copy()))
    x = np.random.default_rng(1).standard_normal((2, 1, 8, 8)).astype(np.float32)
    y = np.array([3, 7])
    loss = F.cross_entropy(net(kiln.tensor(x)), kiln.tensor(y))
    loss.backward()
    tloss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))
    tloss.backward()
    assert abs(loss.item() - tloss.item()) < 1e-5
    assert np.allclose(np.asarray(net.conv.weight.grad), ref[0].weight.grad.numpy(), atol=1e-5)
    assert np.allclose(np.asarray(net.fc.weight.grad), ref[4].weight.grad.numpy(), atol=1e-5)

    opt = kiln.optim.SGD(net.parameters(), lr=0.1)
    before = loss.item()
    for _ in range(20):
        opt.zero_grad()
        loss = F.cross_entropy(net(kiln.tensor(x)), kiln.tensor(y))
        loss.backward()
        opt.step()
    assert loss.item() < before / 2


def test_no_grad_records_nothing():
    w = kiln.tensor([1.0, 2.0], requires_grad=True)
    with kiln.no_grad():
        assert not kiln.is_grad_enabled()
        y = w * 2
    assert kiln.is_grad_enabled() and not y.requires_grad


def test_embedding_and_layer_norm_modules_match_pytorch(torch):
    kiln.manual_seed(2)
    emb, norm = kiln.nn.Embedding(11, 6), kiln.nn.LayerNorm(6)
    ids = np.array([[1, 5, 5, 10], [0, 3, 2, 1]])
    out = norm(emb(kiln.tensor(ids)))
    (out * out).sum().backward()
    temb = torch.nn.Embedding(11, 6)
    tnorm = torch.nn.LayerNorm(6)
    with torch.no_grad():
        temb.weight.copy_(torch.from_numpy(np.asarray(emb.weight).copy()))
    tout = tnorm(temb(torch.from_numpy(ids)))
    (tout * tout).sum().backward()
    assert np.allclose(np.asarray(out.detach()), tout.detach().numpy(), atol=1e-5)
    assert np.allclose(np.asarray(emb.weight.grad), temb.weight.grad.numpy(), atol=1e-4)
    assert np.allclose(np.asarray(norm.weight.grad), tnorm.weight.grad.numpy(), atol=1e-4)


def test_the_gpt_learns_a_batch_and_generates():
    kiln.manual_seed(0)
    gpt = kiln.nn.GPT(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=32)
    assert gpt.config.n_layer == 2 and len(gpt.parameters()) > 10
    ids = kiln.tensor(np.arange(32).reshape(2, 16) % 32)
    targets = kiln.tensor((np.arange(32).reshape(2, 16) + 1) % 32)
    assert gpt(ids).shape == (2, 16, 32)
    opt = kiln.optim.AdamW(gpt.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        opt.zero_grad()
        loss = gpt.loss(ids, targets)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first / 3
    out = gpt.generate([3, 4, 5], 6, temperature=0)
    assert out[:3] == [3, 4, 5] and len(out) == 9 and out[3:6] == [6, 7, 8]  # it learned to count


def test_state_dict_through_a_safetensors_file(tmp_path):
    kiln.manual_seed(5)
    a = kiln.nn.Sequential(kiln.nn.Linear(4, 3), kiln.nn.ReLU(), kiln.nn.Linear(3, 2))
    kiln.save_file(a.state_dict(), str(tmp_path / "w.safetensors"), metadata={"note": "test"})
    loaded = kiln.load_file(str(tmp_path / "w.safetensors"))
    assert sorted(loaded) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    b = kiln.nn.Sequential(kiln.nn.Linear(4, 3), kiln.nn.ReLU(), kiln.nn.Linear(3, 2))
    b.load_state_dict(loaded)
    x = kiln.randn([5, 4])
    assert np.array_equal(np.asarray(a(x).detach()), np.asarray(b(x).detach()))
    del loaded["2.bias"]

    with pytest.raises(KeyError, match="missing \\['2.bias'\\]"):
        b.load_state_dict(loaded)

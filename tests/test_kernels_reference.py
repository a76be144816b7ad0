import pytest
import torch

from bildlib.kernels import max_prob, rollback_distance


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_max_prob_matches_softmax(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(7, 1000, generator=g) * 4).to(dtype)
    x[2, :500] = float("-inf")  # masked entries
    x[3, 10] = x[3, 20] = x[3].max() + 1  # tie: first maximum wins, like torch.argmax
    p, i = max_prob(x)
    ref = torch.softmax(x.float(), dim=-1)
    torch.testing.assert_close(p, ref.max(dim=-1).values)
    assert torch.equal(i, x.float().argmax(dim=-1))
    assert int(i[3]) == 10


def test_rollback_distance_is_cross_entropy():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 33, generator=g)
    t = torch.randint(0, 33, (5,), generator=g)
    d, a = rollback_distance(x, t)
    torch.testing.assert_close(d, torch.nn.functional.cross_entropy(x, t, reduction="none"))
    assert torch.equal(a, x.argmax(dim=-1))


def test_rollback_distance_shape_mismatch():
    with pytest.raises(ValueError, match="tokens"):
        rollback_distance(torch.zeros(3, 8), torch.zeros(4, dtype=torch.long))


def test_margin_is_top1_minus_top2():
    x = torch.tensor([[0.0, 2.0, 1.0], [3.0, 3.0, 0.0]])
    p, i, margin = max_prob(x, margin=True)
    top = torch.softmax(x, -1).topk(2).values
    torch.testing.assert_close(margin, top[:, 0] - top[:, 1])
    assert float(margin[1]) == 0.0 and int(i[1]) == 0


def test_nucleus_keeps_the_smallest_set_reaching_top_p():
    from bildlib.kernels import nucleus

    probs = torch.tensor([[0.5, 0.05, 0.3, 0.15]])
    x = probs.log()
    kept = lambda top_p: torch.isfinite(nucleus(x, 1.0, top_p))[0].tolist()  # noqa: E731
    assert kept(0.5) == [True, False, False, False]
    assert kept(0.6) == [True, False, True, False]
    assert kept(0.81) == [True, False, True, True]
    assert kept(1.0) == [True] * 4
    assert torch.isfinite(nucleus(x, 0.0))[0].tolist() == [True, False, False, False]  # greedy
    torch.testing.assert_close(nucleus(x, 2.0), x / 2)


def test_sample_never_draws_a_masked_token_and_follows_the_distribution():
    from bildlib.kernels import sample

    x = torch.tensor([[0.0, float("-inf"), 1.0, float("-inf")]]).repeat(4000, 1)
    u = torch.rand(4000, generator=torch.Generator().manual_seed(0))
    t = sample(x, u)
    assert set(t.tolist()) <= {0, 2}
    frac = (t == 2).float().mean().item()
    assert abs(frac - torch.softmax(x[0], -1)[2].item()) < 0.03
    assert sample(x[:1], torch.tensor([0.999999])).item() == 2  # top end: the last allowed token


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_the_cpu_argmax_is_torchs_on_ties_nans_and_every_shape(dtype):
    """kernels.argmax (numpy's on a CPU) gives torch.argmax's index everywhere: irregular shapes,
    ties (the first maximum), -inf rows, NaN (the first NaN wins, as in torch), -0.0 against 0.0,
    a non-contiguous view; and max_prob's maximum is the row's own value at that index."""
    from bildlib.kernels import argmax, max_prob

    g = torch.Generator().manual_seed(0)
    cases = [torch.randn(k, v, generator=g) for k, v in ((1, 1), (1, 7), (3, 1000), (11, 32128), (17, 33))]
    ties = torch.randint(0, 3, (5, 64), generator=g).float()  # many ties per row
    edge = torch.tensor([[float("-inf")] * 4, [0.0, -0.0, 0.0, -1.0], [-0.0, 0.0, -1.0, -2.0],
                         [1.0, float("nan"), 2.0, float("nan")], [float("nan")] * 4])  # fmt: skip
    cases += [ties, edge, torch.randn(40, 6, generator=g).t()]  # the last: a transposed view
    for x in cases:
        x = x.to(dtype)
        assert torch.equal(argmax(x), x.argmax(dim=-1)), x
        p, idx = max_prob(x)
        assert torch.equal(idx, x.argmax(dim=-1))
    x = torch.randn(4, 500, generator=g)
    p, idx = max_prob(x)  # the C++ reduction where the native engine builds (tests/test_draft.py)
    ref = torch.exp(x.max(dim=-1).values - torch.logsumexp(x, dim=-1))
    torch.testing.assert_close(p, ref, rtol=1e-5, atol=0)

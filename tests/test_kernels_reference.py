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

"""The per-sentence anatomy (bench.anatomy): its parts add up to the sentence's wall time, the
encoders are apart from the calls they ran in, the counts are the Trace's, and the policy's
functions are put back after it. No timing is asserted."""

import pytest

from bildlib.bench import anatomy
from bildlib.decoding.policy import Policy


def test_the_parts_add_up_and_the_counts_are_the_traces(multi30k_dir):
    propose = Policy.propose
    t = anatomy.run(n=2, warmup=1, dtype="float32", threads=1).set_index("decoder")
    assert Policy.propose is propose and anatomy.bild_module.first_rollback.__name__ == "first_rollback"
    assert list(t.index) == list(anatomy.DECODERS)
    parts = t[[f"{p}_ms" for p in anatomy.PARTS]].sum(axis=1)
    assert ((parts - t["ms"]).abs() < 1e-6 * t["ms"] + 1e-9).all()
    assert (t[["small_ms", "large_ms", "encoders_ms", "policy_ms"]] >= 0).all().all()
    assert t.loc["vanilla large", "small_calls"] == 0 and t.loc["vanilla large", "small_ms"] == 0
    assert t.loc["vanilla small", "large_calls"] == 0 and t.loc["vanilla small", "large_ms"] == 0
    bild = t.loc["BiLD α_FB 0.4, α_RB 1.0"]
    # the small model's confidence and token: in its native run (in "small"), else timed here
    native = t["engine"].iloc[0].startswith("native")
    assert bild["small_calls"] > 0 and bild["large_calls"] > 0
    assert bild["policy_calls"] > (0 if native else bild["small_calls"])
    assert (t["encoders_ms"] > 0).all()  # each decoder's source encoded once per model it ran


def test_a_bad_count_is_refused():
    with pytest.raises(SystemExit):
        anatomy.main(["--n", "0"])

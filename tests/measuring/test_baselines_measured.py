import numpy as np
import pytest

from cdmpp.train.baselines import NotFittedError, SegmentSumMLP, store_rows


def test_store_rows_one_per_written_buffer(tiny_featurized):
    _, data = tiny_featurized
    rows, seg = store_rows(data, np.arange(len(data)))
    assert rows.shape[1] == 164 and rows.dtype == np.float32 and seg.shape == (len(rows),)
    assert set(seg.tolist()) == set(range(len(data)))  # every program has at least one row
    # the rows of a program sum to the per-program sum the tree baseline uses
    for j in range(len(data)):
        np.testing.assert_allclose(rows[seg == j].sum(0), data.psf_sum[j], rtol=1e-4, atol=1e-3)

def test_segment_sum_mlp_fits_real_labels(tiny_featurized):
    _, data = tiny_featurized
    idx = np.arange(len(data))
    with pytest.raises(NotFittedError):
        SegmentSumMLP().predict(data, idx)
    mlp = SegmentSumMLP(epochs=60, hidden=32, batch_size=len(data)).fit(data, idx)
    pred = mlp.predict(data, idx)
    assert pred.dtype == np.float64 and pred.shape == (len(data),) and np.all(pred > 0)
    # trained on these programs, it is closer to them in log space than their mean is
    err = np.abs(np.log(pred) - np.log(data.latency)).mean()
    assert err < np.abs(np.log(data.latency) - np.log(data.latency).mean()).mean()

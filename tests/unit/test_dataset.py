import pytest

from cdmpp import dataset as ds


def test_empty_database_is_a_clear_error(tmp_path):
    (tmp_path / ds.WORKLOAD_FILE).write_text("")
    (tmp_path / ds.RECORD_FILE).write_text("")
    with pytest.raises(ds.DatasetError, match="no measured tuning record"):
        ds.load_database(tmp_path / ds.WORKLOAD_FILE, tmp_path / ds.RECORD_FILE)
    with pytest.raises(ds.DatasetError, match="not found"):
        ds.load_database(tmp_path / "nope.json", tmp_path / ds.RECORD_FILE)

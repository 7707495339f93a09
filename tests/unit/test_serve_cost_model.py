import pytest


def test_search_and_online_settings_refuse_bad_values():
    from cdmpp.errors import InputError
    from cdmpp.tuning.config import OnlineConfig, SearchConfig
    from cdmpp.tvm_compat import ms

    with pytest.raises(InputError, match="objective"):
        OnlineConfig(objective="listwise")
    with pytest.raises(InputError, match="eps_greedy"):
        SearchConfig(eps_greedy=1.5)
    with pytest.raises(InputError, match="population_size"):
        SearchConfig(population_size=0)
    assert isinstance(SearchConfig(population_size=64).strategy(), ms.search_strategy.EvolutionarySearch)

"""The MetaSchedule side of cdmpp: what TVM's own tuner talks to.

- :mod:`.cost_model`: :class:`~cdmpp.tuning.cost_model.CdmppCostModel`, the
  ``PyCostModel`` plugin that lets ``tune_tir``/``tune_relax`` rank candidates with a
  checkpoint and learn from each measured batch;
- :mod:`.config`: the plugin's settings (how it learns online, how the search uses it),
  plain dataclasses without TVM or torch;
- :mod:`.tune`: ``cdmpp tune``, a whole network tuned with ``tune_relax``, built and
  tabulated, with gathers measured on in-range indices.

The collector's tuned phase (``cdmpp collect --tuned-guide cdmpp``) and the tuning
benchmarks use these too; the HTTP service (:mod:`cdmpp.serve`) does not.
"""

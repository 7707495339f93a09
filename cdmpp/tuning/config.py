"""Settings of ``cdmpp tune`` and of the cost-model plugin: how it learns from trials, and how the search uses it.

Plain dataclasses without TVM or torch, so that ``cdmpp tune``'s options and
``cdmpp bench tune``'s variants build them without loading the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cdmpp.device import inference_precision
from cdmpp.errors import InputError

COST_MODELS = ("cdmpp", "xgb")
"""The cost models :func:`cdmpp.tuning.tune.tune_network` can guide the search with."""


@dataclass
class OnlineConfig:
    """How :class:`CdmppCostModel` learns from a task's measured trials.

    Attributes:
        enabled: learn from ``update`` at all (``False``: the pretrained model only).
        min_trials: measured trials before the residual trees are fitted (before that,
            only the mean log residual shifts the level, which keeps the ranking).
        rounds: boosting rounds of the residual trees.
        max_depth: depth of each tree.
        learning_rate: XGBoost's ``eta``.
        seed: XGBoost's seed.
        trace_inputs: the residual trees also read each program's schedule-trace vector
            (``TRACE_DIM`` values; missing for a program without a trace); ``False``:
            the summed leaf features alone.
        objective: ``"squared"``: the trees fit the log-latency residual
            (``reg:squarederror``); ``"pairwise"``: they learn the order of the trials
            within each task (XGBoost's ``rank:pairwise``, the loss of AutoTVM's
            ``XGBTuner``, ``loss_type="rank"``), starting from the transformer's
            log-latency plus the level shift, so the scores keep its scale.

    Raises:
        InputError: an unknown objective, or a count below 1.
    """

    enabled: bool = True
    min_trials: int = 8
    rounds: int = 40
    max_depth: int = 4
    learning_rate: float = 0.2
    seed: int = 0
    trace_inputs: bool = True
    objective: str = "squared"

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise InputError(f"online objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.min_trials < 1 or self.rounds < 1 or self.max_depth < 1:
            raise InputError(f"min_trials, rounds and max_depth must be >= 1, got {self.min_trials}, {self.rounds}, "
                             f"{self.max_depth}")


OBJECTIVES = {"squared": "reg:squarederror", "pairwise": "rank:pairwise"}
"""XGBoost objective of each :attr:`OnlineConfig.objective`."""


@dataclass
class SearchConfig:
    """How MetaSchedule's evolutionary search uses the cost model (TVM's defaults).

    Each round samples ``population_size`` candidates, a share ``init_measured_ratio``
    of them from the task's best measured programs, evolves them for
    ``genetic_num_iters`` generations under the cost model's scores, and measures the
    best-scored ones, except a share ``eps_greedy`` picked at random.

    Raises:
        InputError: a population below 1, generations below 1, or a share outside [0, 1].
    """

    population_size: int = 512
    init_measured_ratio: float = 0.2
    genetic_num_iters: int = 4
    eps_greedy: float = 0.05

    def __post_init__(self):
        if self.population_size < 1 or self.genetic_num_iters < 1:
            raise InputError(f"population_size and genetic_num_iters must be >= 1, got {self.population_size}, "
                             f"{self.genetic_num_iters}")
        for name in ("init_measured_ratio", "eps_greedy"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise InputError(f"{name} must be within [0, 1], got {getattr(self, name)}")

    def strategy(self):
        """The ``ms.search_strategy.EvolutionarySearch`` with these settings."""
        from cdmpp.tvm_compat import ms  # noqa: PLC0415  (keeps tvm off this module's import)

        return ms.search_strategy.EvolutionarySearch(
            population_size=self.population_size, init_measured_ratio=self.init_measured_ratio,
            init_min_unmeasured=min(50, self.population_size), genetic_num_iters=self.genetic_num_iters,
            eps_greedy=self.eps_greedy)


@dataclass
class TuneConfig:
    """How :func:`tune_network` tunes.

    Attributes:
        trials: the global trial budget over all tasks (trials already in the work dir count).
        trials_per_iter: trials measured per search iteration of a task.
        cost_model: ``"cdmpp"`` (this package's plugin) or ``"xgb"`` (TVM's ``XGBModel``).
        checkpoint: the plugin's checkpoint (``None``: the shipped one).
        seed: seed of the search.
        search: the evolutionary search's settings (both cost models).
        online: how the plugin learns from the trials (``"cdmpp"`` only).
        precision: how the plugin's transformer runs (:data:`cdmpp.device.INFERENCE_PRECISIONS`).

    Raises:
        InputError: a budget below 1 or an unknown cost model.
    """

    trials: int = 1000
    trials_per_iter: int = 32
    cost_model: str = "cdmpp"
    checkpoint: Path | None = None
    seed: int = 0
    search: SearchConfig = field(default_factory=SearchConfig)
    online: OnlineConfig = field(default_factory=OnlineConfig)
    precision: str = "fp32"

    def __post_init__(self):
        if self.trials < 1 or self.trials_per_iter < 1:
            raise InputError(f"trials and trials_per_iter must be >= 1, got {self.trials}, {self.trials_per_iter}")
        inference_precision(self.precision)  # an unknown one is refused here
        if self.cost_model not in COST_MODELS:
            raise InputError(f"cost model must be one of {', '.join(COST_MODELS)}, got {self.cost_model!r}")

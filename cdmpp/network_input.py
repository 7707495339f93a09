"""A network as a user names it: a zoo name, a Relax JSON file or ``module.py:function``.

``cdmpp estimate`` reads its tuning tasks (:func:`load_network`); ``cdmpp tune`` also
needs the Relax module to tune and to compile (:func:`load_relax`).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError


@dataclass
class RelaxNetwork:
    """A network in Relax, as it is deployed: a per-call ``main`` and, for a torch model,
    the computations on its weights alone in a function run once at load
    (:func:`cdmpp.relax_import.import_torch`).

    Attributes:
        name: how the user named it.
        mod: the per-call Relax IRModule fused: its PrimFuncs are the tuning tasks.
        unfused: the per-call module before fusion, the form ``compile_relax`` takes (it
            fuses itself); for a Relax JSON file, the module as given.
        target: the TVM ``Target`` it was fused for.
        load_time: the IRModule of the load-time function (``None`` for a Relax JSON file).
        weights: the model's own weights, the load-time function's input
            (``tvm.runtime.Tensor`` each; empty for a Relax JSON file).
        example_inputs: the network's example inputs (torch tensors; empty for JSON).
    """

    name: str
    mod: object
    unfused: object
    target: object = None
    load_time: object = None
    weights: list = field(default_factory=list)
    example_inputs: tuple = ()

    @functools.cached_property
    def params(self) -> list:
        """The weights the per-call ``main`` takes after the inputs: the load-time
        function run once on :attr:`weights` (``tvm.runtime.Tensor`` each; empty for a
        Relax JSON file).  Computed on first use (it compiles the load-time function)."""
        if self.load_time is None:
            return []
        from cdmpp.relax_import import load_time_params  # noqa: PLC0415  (keeps tvm off this module's import)

        return load_time_params(self.load_time, self.weights, self.target)


def user_model(spec: str):
    """``(torch.nn.Module, example inputs)`` of ``module.py:function``.

    Raises:
        InputError: a missing file, an import that fails, no such function, or one that
            does not return a model and a tuple of inputs.
    """
    path, func = spec.rsplit(":", 1)
    if not Path(path).is_file():
        raise InputError(f"{path}: no such Python file")
    mspec = importlib.util.spec_from_file_location(f"cdmpp_user_network_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(mspec)
    try:
        mspec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001  the user's code
        raise InputError(f"{path}: importing it failed: {type(err).__name__}: {err}") from err
    fn = getattr(module, func, None)
    if not callable(fn):
        raise InputError(f"{path} has no function {func!r}")
    got = fn()
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], tuple)):
        raise InputError(f"{spec} must return (torch.nn.Module, tuple of example inputs), got {type(got).__name__}")
    return got


def load_relax(spec: str, target) -> RelaxNetwork:
    """The Relax form (as deployed) of a network given as a zoo name, a ``.json`` file of a Relax
    IRModule in TVM JSON, or ``module.py:function``.

    ``module.py:function`` is a Python file and a function in it that takes no argument
    and returns ``(torch.nn.Module, tuple of example input tensors)``; the model goes
    through the zoo's own torch -> Relax import (``torch.export``).

    Raises:
        InputError: a file that is missing or malformed, or a function that does not
            return a model and inputs.  UnknownNetworkError: an unknown zoo name.
    """
    from . import networks as zoo  # noqa: PLC0415  (keeps torch off this module's import)
    from .tvm_compat import (  # noqa: PLC0415  (keeps tvm off this module's import)
        IRModule,
        Target,
        load_json,
    )

    target = target if isinstance(target, Target) else Target(target)
    if spec.endswith(".json"):
        if not Path(spec).is_file():
            raise InputError(f"{spec}: no such file")
        try:
            mod = load_json(Path(spec).read_text(encoding="utf-8"))
        except Exception as err:  # noqa: BLE001
            raise InputError(f"{spec}: malformed TVM JSON: {str(err).strip()[:300]}") from err
        if not isinstance(mod, IRModule):
            raise InputError(f"{spec}: the JSON holds a {type(mod).__name__}, not an IRModule")
        return RelaxNetwork(spec, mod, mod, target)
    if ".py:" in spec:
        model, inputs = user_model(spec)
    else:
        net = zoo.get_network(spec)
        model, inputs = net.build(), net.example_inputs()
    return relax_network(spec, model, inputs, target)


def relax_network(name: str, model, inputs: tuple, target) -> RelaxNetwork:
    """A torch model in Relax as it is deployed (:func:`cdmpp.relax_import.import_torch`):
    the per-call function fused (the tuning tasks) and unfused (what ``compile_relax``
    takes), and the load-time function with the model's weights.  The one torch -> Relax
    path of collection, tuning, the estimate and the truth check.

    Args:
        name: how the network is named (kept in the result and in error messages).
        model: a ``torch.nn.Module``.
        inputs: its example input tensors.
        target: a TVM ``Target``.

    Raises:
        InputError: the import failed.
    """
    from cdmpp.relax_import import fuse_relax, import_torch  # noqa: PLC0415  (keeps tvm off this module's import)

    try:
        unfused, load_time, weights = import_torch(model, inputs)
        mod = fuse_relax(unfused, target)
    except Exception as err:  # noqa: BLE001  torch.export and TVM raise their own types
        raise InputError(f"{name}: the torch -> Relax import failed: {str(err).strip()[:300]}") from err
    return RelaxNetwork(name, mod, unfused, target, load_time, weights, inputs)


def load_network(spec: str, target) -> tuple[list, str]:
    """The tuning tasks of a network named as :func:`load_relax` takes it.

    Returns:
        ``(tasks, a name for the network)``: :class:`cdmpp.tasks.Task` each.

    Raises:
        InputError, UnknownNetworkError: as :func:`load_relax`.
    """
    from .tasks import relax_tasks, zoo_tasks  # noqa: PLC0415  (keeps tvm off this module's import)

    if ".py:" in spec or spec.endswith(".json"):
        net = load_relax(spec, target)
        return relax_tasks(net.mod, target), spec
    return zoo_tasks(spec, target), spec

"""A network as a user names it: a zoo name, a Relax JSON file or ``module.py:function``.

``cdmpp estimate`` reads its tuning tasks (:func:`load_network`); ``cdmpp tune`` also
needs the Relax module to tune and to compile (:func:`load_relax`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError


@dataclass
class RelaxNetwork:
    """A network in Relax.

    Attributes:
        name: how the user named it.
        mod: the Relax IRModule whose fused PrimFuncs are the tuning tasks.
        unfused: the module before fusion, the form ``compile_relax`` takes (it fuses
            itself); for a Relax JSON file, the module as given.
        params: the weights ``main`` takes after the inputs (``tvm.runtime.Tensor`` each;
            empty for a Relax JSON file).
        example_inputs: the network's example inputs (torch tensors; empty for JSON).
    """

    name: str
    mod: object
    unfused: object
    params: list = field(default_factory=list)
    example_inputs: tuple = ()


def _user_model(spec: str):
    """``(torch.nn.Module, example inputs)`` of ``module.py:function``."""
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
    """The Relax form of a network given as a zoo name, a ``.json`` file of a Relax
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
        return RelaxNetwork(spec, mod, mod)
    if ".py:" in spec:
        model, inputs = _user_model(spec)
    else:
        net = zoo.get_network(spec)
        model, inputs = net.build(), net.example_inputs()
    return relax_network(spec, model, inputs, target)


def relax_network(name: str, model, inputs: tuple, target) -> RelaxNetwork:
    """A torch model in Relax through the zoo's own torch -> Relax import
    (``torch.export``), fused (the tuning tasks) and unfused (what ``compile_relax`` takes).

    Args:
        name: how the network is named (kept in the result and in error messages).
        model: a ``torch.nn.Module``.
        inputs: its example input tensors.
        target: a TVM ``Target``.

    Raises:
        InputError: the import failed.
    """
    from .tvm_compat import relax_module_and_params_from_torch  # noqa: PLC0415  (keeps tvm off this module's import)

    try:
        mod, params = relax_module_and_params_from_torch(model, inputs, target)
        unfused, _ = relax_module_and_params_from_torch(model, inputs, target, fuse=False)
    except Exception as err:  # noqa: BLE001  torch.export and TVM raise their own types
        raise InputError(f"{name}: the torch -> Relax import failed: {str(err).strip()[:300]}") from err
    return RelaxNetwork(name, mod, unfused, params, inputs)


def load_network(spec: str, target) -> tuple[list, str]:
    """The tuning tasks of a network named as :func:`load_relax` takes it.

    Returns:
        ``(tasks, a name for the network)``: :class:`cdmpp.tasks.Task` each.

    Raises:
        InputError, UnknownNetworkError: as :func:`load_relax`.
    """
    from .estimate import relax_tasks, zoo_tasks  # noqa: PLC0415  (keeps tvm off this module's import)

    if ".py:" in spec or spec.endswith(".json"):
        net = load_relax(spec, target)
        return relax_tasks(net.mod, target), spec
    return zoo_tasks(spec, target), spec

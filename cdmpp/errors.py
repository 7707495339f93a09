"""The project's exceptions, importable from ``cdmpp``.

Every error the project raises on bad input (a malformed program, a corrupt file, an
unknown device, a busy machine) derives from :class:`CdmppError`; the ``cdmpp``
command prints these in one line and keeps the traceback of anything else.  Each
also keeps the built-in base it had before (``ValueError`` or ``RuntimeError``), so
``except ValueError`` still catches the ones that were value errors.

This module imports nothing heavy, so importing it loads neither TVM nor torch.
"""

from __future__ import annotations


class CdmppError(Exception):
    """Base of every error cdmpp raises on bad input, corrupt files or an unfit environment."""


class UnknownDeviceError(CdmppError, ValueError):
    """A device id the checkpoint does not know (the message lists the ones it knows)."""


class InputError(CdmppError, ValueError):
    """An argument, setting or request cdmpp cannot use (the message names it and why)."""


class UnknownNetworkError(InputError, KeyError):
    """A network name that is not in the zoo or not in a dataset (the message lists what is)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DeviceUnavailableError(CdmppError, RuntimeError):
    """The measuring device asked for is not present on this host, or cannot be compiled for
    (the message names it)."""


class CheckpointError(CdmppError, ValueError):
    """A checkpoint folder is missing a file, or a file is corrupt or does not match."""


class DatasetError(CdmppError, ValueError):
    """A dataset file is missing, empty or malformed."""

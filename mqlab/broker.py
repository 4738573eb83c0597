"""Kept for code written before :mod:`mqlab.rabbitmq`: the same names, re-exported."""

from mqlab.rabbitmq import *  # noqa: F403
from mqlab.rabbitmq import __all__ as __all__

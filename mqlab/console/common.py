"""What every command shares: its exit codes, its one-line error, and a checked profile."""

from __future__ import annotations

import argparse

from mqlab import redact
from mqlab.config.check import check_profile
from mqlab.config.profile import Profile, load_profile
from mqlab.errors import ProfileError
from mqlab.registry import LoadedPlugin

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def load(path: str, args: argparse.Namespace | None = None) -> Profile:
    try:
        profile = load_profile(path)
        if args is not None:
            profile = profile.with_overrides(
                args.duration, args.warmup, args.processes, args.broker
            )
    except ProfileError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    # every later output (errors, logs, results) is scrubbed of these
    redact.remember(
        (u for d in profile.drivers for u in profile.urls_of(d)),
        (o for d in profile.drivers for o in d.options),
    )
    redact.remember(profile.broker.urls)
    return profile


def check(profile: Profile) -> dict[str, LoadedPlugin]:
    try:
        return check_profile(profile)
    except ProfileError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None

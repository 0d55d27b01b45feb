"""A password for a command (`vigil admin create`, `vigil plan`): a prompt, or the first
line of standard input for scripts."""

from __future__ import annotations

import sys


def read_password(from_stdin: bool, confirm: bool = True) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    import getpass

    password = getpass.getpass("Password: ")
    if confirm and getpass.getpass("Password again: ") != password:
        raise ValueError("the two passwords differ; nothing was created")
    return password

"""The two kinds of failure every command distinguishes (DESIGN §4 exit codes)."""


class InputError(Exception):
    """Bad input: a config, inventory, plan, option or remote output. Exit code 2.

    The message is one line naming the file, the field and what was expected.
    """

    exit_code = 2


class RunError(Exception):
    """The run itself failed (a host, a check). Exit code 1."""

    exit_code = 1
